// examples/java/Traps.java: the type traps of JDBC with inbox, shown.
//
// Each line printed is a fact examples/test compares with what
// examples/README.md says.  Usage: java -cp postgresql.jar:. Traps JDBC_URL

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.UUID;

public class Traps {
	interface Binder {
		void bind(PreparedStatement ps) throws SQLException;
	}

	static String sqlstate(Connection conn, String sql, Binder binder) {
		try (PreparedStatement ps = conn.prepareStatement(sql)) {
			binder.bind(ps);
			ps.executeQuery().close();
			return "ok";
		} catch (SQLException e) {
			return e.getSQLState();
		}
	}

	static boolean claim(Connection conn, Binder binder) throws SQLException {
		try (PreparedStatement ps = conn.prepareStatement("SELECT inbox_claim(?, 'traps')")) {
			binder.bind(ps);
			try (ResultSet rs = ps.executeQuery()) {
				rs.next();
				return rs.getBoolean(1);
			}
		}
	}

	public static void main(String[] args) throws Exception {
		try (Connection conn = DriverManager.getConnection(args[0])) {
			// A NULL token (processed, failed, busy) reads as 0 with getLong().
			conn.createStatement().executeQuery("SELECT inbox_claim('java-trap-1', 'traps')").close();
			try (ResultSet rs = conn.createStatement().executeQuery(
					"SELECT token FROM inbox_begin_outcome('java-trap-1', 'traps')")) {
				rs.next();
				System.out.println("NULL token, getLong: " + rs.getLong(1));
				System.out.println("NULL token, getObject(Long.class): " + rs.getObject(1, Long.class));
			}

			// setLong sends a bigint: there is no inbox_claim(bigint, ...).
			System.out.println("setLong message id: " +
				sqlstate(conn, "SELECT inbox_claim(?, 'traps')", ps -> ps.setLong(1, 1001)));
			// setString sends a varchar: a jsonb parameter needs ?::jsonb.
			System.out.println("setString payload: " + sqlstate(conn,
				"SELECT inbox_begin('java-trap-2', 'traps', payload => ?)", ps -> ps.setString(1, "{}")));
			System.out.println("setString payload, ?::jsonb: " + sqlstate(conn,
				"SELECT inbox_begin('java-trap-3', 'traps', payload => ?::jsonb)", ps -> ps.setString(1, "{}")));

			// setObject(UUID) goes to the uuid overload, stored in canonical
			// form, so the same id as text (lower case) is a duplicate.
			UUID u = UUID.fromString("6F9619FF-8B86-D011-B42D-00C04FC964FF");
			System.out.println("UUID, then the same as text: " +
				claim(conn, ps -> ps.setObject(1, u)) + " " + claim(conn, ps -> ps.setString(1, u.toString())));
		}
	}
}
