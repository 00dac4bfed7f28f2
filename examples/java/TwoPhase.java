// examples/java/TwoPhase.java: a two-phase inbox handler with JDBC.
//
// For a side effect that cannot join the database transaction (here an HTTP
// call to examples/fake_service.py): begin (commit the claim), call the
// service with the message id as the idempotency key and the claim's token
// as the fence, then complete, each step in its own short transaction.
//
// Usage:
//   java -cp postgresql.jar:. TwoPhase JDBC_URL SERVICE_URL
//       consume standard input, one message per line, "message_id<TAB>
//       account<TAB>amount"; prints "ack ID ..." or "nack ID ..."
//   java -cp postgresql.jar:. TwoPhase stale JDBC_URL SERVICE_URL MESSAGE_ID
//       a stale owner, step by step: its send is fenced and its completion
//       refused

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayDeque;

public class TwoPhase {
	static final String CONSUMER = "notify";
	// INBOX_EXAMPLE_LEASE (seconds): the test's restart run shortens it, so
	// that a claim whose owner lost its connection is taken over sooner.
	static final String LEASE = System.getenv().getOrDefault("INBOX_EXAMPLE_LEASE", "30") + " seconds";
	static final HttpClient http = HttpClient.newHttpClient();

	// token is null unless the begin claimed the message.  Read it with
	// getObject(..., Long.class): getLong() answers 0 for a NULL.
	record Begin(String outcome, Long token, double retrySeconds) {}

	// The connection stays in JDBC's default autocommit mode: each step must
	// commit on its own, the begin before the side effect.  In a transaction
	// (setAutoCommit(false)) the claim would stay invisible until commit:
	// other instances would block on it, and a crash would roll it back
	// after the side effect.
	static Begin begin(Connection conn, String id, String payloadJson, String lease) throws Exception {
		// The payload goes as text with a cast: setString() sends a varchar,
		// and no inbox_begin_outcome takes a varchar payload (42883).
		try (PreparedStatement ps = conn.prepareStatement(
				"SELECT outcome, token, extract(epoch FROM retry_after)::float8" +
				" FROM inbox_begin_outcome(?, ?, lease => ?::interval, payload => ?::jsonb)")) {
			ps.setString(1, id);
			ps.setString(2, CONSUMER);
			ps.setString(3, lease);
			ps.setString(4, payloadJson);
			try (ResultSet rs = ps.executeQuery()) {
				rs.next();
				return new Begin(rs.getString(1), rs.getObject(2, Long.class), rs.getDouble(3));
			}
		}
	}

	static boolean call(Connection conn, String sql, String id, long token) throws Exception {
		try (PreparedStatement ps = conn.prepareStatement(sql)) {
			ps.setString(1, id);
			ps.setString(2, CONSUMER);
			ps.setLong(3, token);
			try (ResultSet rs = ps.executeQuery()) {
				rs.next();
				return rs.getBoolean(1);
			}
		}
	}

	static boolean complete(Connection conn, String id, long token) throws Exception {
		return call(conn, "SELECT inbox_complete(?, ?, ?)", id, token);
	}

	// The service's HTTP status: 201 applied, 200 replay, 409 refused (a
	// later token was seen for this key); throws on any other.
	static int send(String url, String id, long token) throws Exception {
		HttpRequest req = HttpRequest.newBuilder(URI.create(url + "/send"))
			.header("Idempotency-Key", id)
			.header("Fencing-Token", Long.toString(token))
			.POST(HttpRequest.BodyPublishers.ofString("{}"))
			.build();
		int status = http.send(req, HttpResponse.BodyHandlers.discarding()).statusCode();
		if (status == 201 || status == 200 || status == 409)
			return status;
		throw new Exception("service answered " + status);
	}

	// Returns "ack why" or "nack why"; sets delay[0] for a nack.
	static String handle(Connection conn, String url, String id, String payload, double[] delay) throws Exception {
		Begin b = begin(conn, id, payload, LEASE);
		delay[0] = 0;
		if (b.outcome().equals("processed") || b.outcome().equals("failed"))
			return "ack " + b.outcome();			// alert on a failed one
		if (b.outcome().equals("busy")) {
			// A live claim holds it: never ack (its holder may die).  A broker
			// would redeliver after retry_after; the holders here finish in
			// milliseconds, so the stand-in retries sooner.
			delay[0] = Math.min(b.retrySeconds(), 0.02);
			return "nack busy";
		}
		// "claimed" or "taken_over": this call owns the message.
		int status;
		try {
			status = send(url, id, b.token());
		} catch (Exception e) {
			try (PreparedStatement ps = conn.prepareStatement("SELECT inbox_fail(?, ?, ?, ?)")) {
				ps.setString(1, id);
				ps.setString(2, CONSUMER);
				ps.setLong(3, b.token());
				ps.setString(4, String.valueOf(e.getMessage()));
				ps.executeQuery().close();
			}
			return "nack error";
		}
		if (status == 409)
			return "nack fenced";					// a later owner exists
		if (complete(conn, id, b.token()))
			return "ack done";
		return "nack lost";							// the next begin says what is left
	}

	static void consume(String jdbcUrl, String url) throws Exception {
		ArrayDeque<String[]> queue = new ArrayDeque<>();
		BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
		for (String line; (line = in.readLine()) != null;)
			queue.add(line.split("\t"));
		StringBuilder out = new StringBuilder();
		double[] delay = new double[1];
		Connection conn = null;
		try {
			while (!queue.isEmpty()) {
				String[] m = queue.poll();
				String payload = "{\"account\": " + Integer.parseInt(m[1]) + ", \"amount\": " + Long.parseLong(m[2]) + "}";
				if (conn == null)
					conn = Errors.connect(jdbcUrl);	// with backoff while the server restarts
				String answer;
				try {
					answer = handle(conn, url, m[0], payload, delay);
				} catch (Exception e) {
					// The README's Errors table (Errors.java).  A claim this
					// process began and could not complete is left to its
					// lease: the redelivery answers busy until it runs out.
					Errors.Action what = Errors.action(e);
					String state = e instanceof java.sql.SQLException s ? s.getSQLState() : "Exception";
					if (what == Errors.Action.DEAD_LETTER) {
						out.append("dead-letter ").append(m[0]).append(' ').append(state).append('\n');
						continue;
					}
					if (what == Errors.Action.STOP) {
						System.out.print(out);
						System.err.println("stop " + m[0] + " " + state + ": " + e.getMessage());
						System.exit(3);
					}
					delay[0] = 0;
					answer = "nack " + (what == Errors.Action.RECONNECT ? "reconnect_" : "retry_") + state;
					if (what == Errors.Action.RECONNECT) {
						try {
							conn.close();
						} catch (java.sql.SQLException ignored) {
						}
						conn = null;
					}
				}
				String[] w = answer.split(" ");
				out.append(w[0]).append(' ').append(m[0]).append(' ').append(w[1].replace('_', ' ')).append('\n');
				if (w[0].equals("nack")) {
					Thread.sleep((long) (delay[0] * 1000));
					queue.add(m);
				}
			}
		} finally {
			if (conn != null)
				conn.close();
		}
		System.out.print(out);
	}

	// Owner A claims with a 1 second lease and pauses past it; owner B takes
	// over; then A wakes up and carries on with its old token.
	static void stale(String jdbcUrl, String url, String id) throws Exception {
		try (Connection a = DriverManager.getConnection(jdbcUrl);
			 Connection b = DriverManager.getConnection(jdbcUrl)) {
			Begin first = begin(a, id, "{}", "1 second");
			System.out.println("first begin: " + first.outcome());
			Begin second;
			// B's begin answers busy, with the lease A has left, until it ran out.
			while ((second = begin(b, id, "{}", "30 seconds")).outcome().equals("busy"))
				Thread.sleep((long) Math.ceil(second.retrySeconds() * 1000));
			System.out.println("second begin: " + second.outcome());
			System.out.println("later token is higher: " + (second.token() > first.token()));
			System.out.println("new owner send: " + send(url, id, second.token()));
			System.out.println("stale owner send: " + send(url, id, first.token()));
			System.out.println("stale owner complete: " + complete(a, id, first.token()));
			System.out.println("new owner complete: " + complete(b, id, second.token()));
		}
	}

	public static void main(String[] args) throws Exception {
		if (args.length == 4 && args[0].equals("stale"))
			stale(args[1], args[2], args[3]);
		else if (args.length == 2)
			consume(args[0], args[1]);
		else {
			System.err.println("usage: TwoPhase [stale] JDBC_URL SERVICE_URL [MESSAGE_ID]");
			System.exit(2);
		}
	}
}
