// examples/java/Errors.java: what a consumer does with an error.
//
// The README's Errors table, as code: every error sorts into one of four
// actions, and the consumers here act on it.
//
//   DEAD_LETTER  a poison message: set it aside, never retry it
//   RETRY        roll back; the message comes again (nack)
//   RECONNECT    the connection is gone or useless: nack, close it, and
//                connect again with backoff
//   STOP         a deployment error: every message would fail; stop and
//                alert

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Set;

public class Errors {
	enum Action { DEAD_LETTER, RETRY, RECONNECT, STOP }

	static final Set<String> DEAD_LETTER = Set.of("22004", "22023", "22001", "2202E", "22P02");
	static final Set<String> RETRY = Set.of("40001", "40P01", "55P03", "57014", "XX000");
	static final Set<String> RECONNECT = Set.of("57P01", "57P02", "57P03", "25006");
	// Server-side prepared statements through a pooler in transaction mode:
	// the driver's setting is wrong, whatever the message.
	static final Set<String> STOP = Set.of("42P05", "26000", "08P01");

	static Action action(Exception e) {
		if (!(e instanceof SQLException s))
			return Action.RETRY;
		String state = s.getSQLState();
		if (state == null)
			return Action.RECONNECT;		// no answer: the connection broke
		if (STOP.contains(state))
			return Action.STOP;
		if (state.equals("54000"))
			// Two errors share it: a payload over 1 MB is poison; the 65th
			// new claim of one REPEATABLE READ transaction is not.
			return String.valueOf(s.getMessage()).contains("too many subtransactions")
				? Action.RETRY : Action.DEAD_LETTER;
		if (DEAD_LETTER.contains(state))
			return Action.DEAD_LETTER;
		if (RETRY.contains(state))
			return Action.RETRY;
		if (RECONNECT.contains(state) || state.startsWith("08"))
			return Action.RECONNECT;
		return Action.STOP;
	}

	// DriverManager.getConnection, retried with backoff (0.1 s doubling to
	// 5 s) while the server is down or starting, for two minutes.
	static Connection connect(String url) throws Exception {
		long deadline = System.nanoTime() + 120_000_000_000L;
		double delay = 0.1;
		for (;;) {
			try {
				return DriverManager.getConnection(url);
			} catch (SQLException e) {
				if (System.nanoTime() + (long) (delay * 1e9) > deadline)
					throw e;
				System.err.printf("# connect failed (%s); again in %.1f s%n", e.getMessage(), delay);
				Thread.sleep((long) (delay * 1000));
				delay = Math.min(delay * 2, 5);
			}
		}
	}
}
