// examples/java/Consumer.java: a one-phase inbox consumer with JDBC.
//
// Reads messages from standard input, one per line, "message_id<TAB>account
// <TAB>amount": the test's stand-in for a broker.  For each one it claims
// the message with inbox_claim, credits the account and writes a ledger row
// in ONE transaction, and acks ("ack ID done" or "ack ID duplicate") on both
// answers.  On an error it does what the README's Errors table says
// (Errors.java): nacks ("nack ID retry|reconnect SQLSTATE"), and the
// stand-in broker delivers the message again later; connects again, with
// backoff, when the connection is gone (a restart, a terminated backend);
// dead-letters a poison message; stops on a deployment error.
//
// Usage: java -cp postgresql.jar:. Consumer JDBC_URL [--fail-every N]
// --fail-every N makes the first delivery of every Nth message fail after
// its claim and business change, before the commit: a crash stand-in.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

public class Consumer {
	static final String CONSUMER = "ledger";

	record Message(String id, int account, long amount) {}

	static String handle(Connection conn, Message m, boolean crash) throws Exception {
		// setAutoCommit(false) (in main): JDBC's default is autocommit, in
		// which the claim would commit alone, before the UPDATE; a failed
		// UPDATE would then leave a claim that skips the redelivery as a
		// duplicate, and the message would be lost silently.
		try {
			boolean claimed;
			try (PreparedStatement ps = conn.prepareStatement("SELECT inbox_claim(?, ?)")) {
				// setString (text) or setObject(java.util.UUID) (uuid): with
				// setLong there is no inbox_claim(bigint, ...) (SQLSTATE 42883).
				ps.setString(1, m.id());
				ps.setString(2, CONSUMER);
				try (ResultSet rs = ps.executeQuery()) {
					rs.next();
					claimed = rs.getBoolean(1);
				}
			}
			if (!claimed) {
				conn.commit();
				return "duplicate";
			}
			try (PreparedStatement ps = conn.prepareStatement(
					"UPDATE accounts SET balance = balance + ? WHERE id = ?")) {
				ps.setLong(1, m.amount());
				ps.setInt(2, m.account());
				ps.executeUpdate();
			}
			try (PreparedStatement ps = conn.prepareStatement(
					"INSERT INTO ledger (message_id, account, amount) VALUES (?, ?, ?)")) {
				ps.setString(1, m.id());
				ps.setInt(2, m.account());
				ps.setLong(3, m.amount());
				ps.executeUpdate();
			}
			if (crash)
				throw new Exception("simulated crash before commit");
			conn.commit();
			return "done";
		} catch (Exception e) {
			try {
				conn.rollback();
			} catch (SQLException r) {
				e.addSuppressed(r);			// the connection is gone: e says why
			}
			throw e;
		}
	}

	public static void main(String[] args) throws Exception {
		int failEvery = 0;
		String url = null;
		for (int i = 0; i < args.length; i++) {
			if (args[i].equals("--fail-every"))
				failEvery = Integer.parseInt(args[++i]);
			else
				url = args[i];
		}
		if (url == null) {
			System.err.println("usage: Consumer JDBC_URL [--fail-every N]");
			System.exit(2);
		}

		ArrayDeque<Message> queue = new ArrayDeque<>();
		Map<String, Integer> order = new HashMap<>();
		BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
		for (String line; (line = in.readLine()) != null;) {
			String[] f = line.split("\t");
			order.putIfAbsent(f[0], order.size() + 1);
			queue.add(new Message(f[0], Integer.parseInt(f[1]), Long.parseLong(f[2])));
		}

		StringBuilder out = new StringBuilder();
		Set<String> crashed = new HashSet<>();
		Connection conn = null;
		try {
			while (!queue.isEmpty()) {
				Message m = queue.poll();
				boolean crash = failEvery > 0 && order.get(m.id()) % failEvery == 0 && crashed.add(m.id());
				if (conn == null) {
					conn = Errors.connect(url);	// with backoff while the server restarts
					conn.setAutoCommit(false);
				}
				try {
					String answer = handle(conn, m, crash);
					out.append("ack ").append(m.id()).append(' ').append(answer).append('\n');
				} catch (Exception e) {
					// What to do is the README's Errors table (Errors.java).
					// Not acked, except a poison message, which goes to a
					// dead-letter queue (here: a line) instead of coming back
					// forever.
					Errors.Action what = Errors.action(e);
					String state = e instanceof SQLException s ? s.getSQLState() : "Exception";
					if (what == Errors.Action.DEAD_LETTER) {
						out.append("dead-letter ").append(m.id()).append(' ').append(state).append('\n');
						continue;
					}
					if (what == Errors.Action.STOP) {
						System.out.print(out);
						System.err.println("stop " + m.id() + " " + state + ": " + e.getMessage());
						System.exit(3);
					}
					out.append("nack ").append(m.id()).append(' ')
						.append(what == Errors.Action.RECONNECT ? "reconnect " : "retry ")
						.append(state).append('\n');
					queue.add(m);
					if (what == Errors.Action.RECONNECT) {
						try {
							conn.close();
						} catch (SQLException ignored) {
						}
						conn = null;
					}
				}
			}
		} finally {
			if (conn != null)
				conn.close();
		}
		System.out.print(out);
	}
}
