using System.Data;
using Npgsql;
using NpgsqlTypes;

namespace Inbox;

/// <summary>The SQL calls, shared by the Npgsql and EF Core entry points. Every call is one statement with
/// parameters; nothing is prepared explicitly (PgBouncer in transaction mode needs no setting).</summary>
public static class InboxCommands
{
    private static string schema = "inbox";

    /// <summary>The schema the extension was created in (<c>CREATE EXTENSION inbox SCHEMA inbox</c>, as the
    /// README installs it): every call is qualified with it, so no <c>search_path</c> is needed.
    /// Default <c>inbox</c>. Set it once at start-up.</summary>
    public static string Schema
    {
        get => schema;
        set
        {
            ArgumentException.ThrowIfNullOrWhiteSpace(value);
            schema = value;
        }
    }

    private static string Fn(string name) => $"\"{schema.Replace("\"", "\"\"", StringComparison.Ordinal)}\".{name}";

    private static NpgsqlCommand Command(NpgsqlConnection connection, NpgsqlTransaction? transaction, string sql)
    {
        if (transaction is null)
            return new NpgsqlCommand(sql, connection);
        try
        {
            return new NpgsqlCommand(sql, connection, transaction);
        }
        catch (InvalidOperationException e)   // Npgsql: "Transaction is already completed"
        {
            throw new InboxTransactionRequiredException(
                "inbox: the transaction is already committed or rolled back; a claim must run inside the open business transaction", e);
        }
    }

    private static void CheckIds(string messageId, string consumer)
    {
        ArgumentNullException.ThrowIfNull(messageId);
        ArgumentNullException.ThrowIfNull(consumer);
    }

    /// <summary><c>inbox_claim(text, text)</c> on a connection inside <paramref name="transaction"/>.</summary>
    internal static async Task<bool> ClaimAsync(NpgsqlConnection connection, NpgsqlTransaction transaction,
        string messageId, string consumer, CancellationToken cancellationToken)
    {
        CheckIds(messageId, consumer);
        await using var cmd = Command(connection, transaction, $"SELECT {Fn("inbox_claim")}($1, $2)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        return (bool)(await cmd.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary><c>inbox_claim(uuid, text)</c> on a connection inside <paramref name="transaction"/>.</summary>
    internal static async Task<bool> ClaimAsync(NpgsqlConnection connection, NpgsqlTransaction transaction,
        Guid messageId, string consumer, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(consumer);
        await using var cmd = Command(connection, transaction, $"SELECT {Fn("inbox_claim")}($1, $2)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Uuid });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        return (bool)(await cmd.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary><c>inbox_claim_many</c> on a connection inside <paramref name="transaction"/>.</summary>
    internal static async Task<IReadOnlyList<string>> ClaimManyAsync(NpgsqlConnection connection,
        NpgsqlTransaction transaction, IEnumerable<string> messageIds, string consumer,
        CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(messageIds);
        ArgumentNullException.ThrowIfNull(consumer);
        await using var cmd = Command(connection, transaction, $"SELECT {Fn("inbox_claim_many")}($1, $2)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageIds.ToArray(), NpgsqlDbType = NpgsqlDbType.Array | NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        var claimed = new List<string>();
        await using var reader = await cmd.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            claimed.Add(reader.GetString(0));
        return claimed;
    }

    /// <summary><c>inbox_begin_outcome</c>, in autocommit on <paramref name="connection"/>.</summary>
    internal static async Task<BeginResult> BeginAsync(NpgsqlConnection connection, string messageId,
        string consumer, TimeSpan? lease, string? payloadJson, CancellationToken cancellationToken)
    {
        CheckIds(messageId, consumer);
        await using var cmd = Command(connection, null,
            $"SELECT outcome, token, retry_after FROM {Fn("inbox_begin_outcome")}($1, $2, $3, $4)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = (object?)lease ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Interval });
        cmd.Parameters.Add(new NpgsqlParameter { Value = (object?)payloadJson ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Jsonb });
        await using var reader = await cmd.ExecuteReaderAsync(CommandBehavior.SingleRow, cancellationToken).ConfigureAwait(false);
        if (!await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            throw new InvalidOperationException("inbox_begin_outcome returned no row");
        var outcome = BeginResult.Parse(reader.GetString(0));
        long? token = reader.IsDBNull(1) ? null : reader.GetInt64(1);
        TimeSpan? retryAfter = reader.IsDBNull(2) ? null : reader.GetFieldValue<TimeSpan>(2);
        return new BeginResult(outcome, token, retryAfter);
    }

    /// <summary><c>inbox_extend</c>, in autocommit.</summary>
    internal static async Task<bool> ExtendAsync(NpgsqlConnection connection, string messageId, string consumer,
        long token, TimeSpan? lease, CancellationToken cancellationToken)
    {
        CheckIds(messageId, consumer);
        await using var cmd = Command(connection, null, $"SELECT {Fn("inbox_extend")}($1, $2, $3, $4)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = token, NpgsqlDbType = NpgsqlDbType.Bigint });
        cmd.Parameters.Add(new NpgsqlParameter { Value = (object?)lease ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Interval });
        return (bool)(await cmd.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary><c>inbox_complete</c>, in autocommit.</summary>
    internal static async Task<bool> CompleteAsync(NpgsqlConnection connection, string messageId, string consumer,
        long token, CancellationToken cancellationToken)
    {
        CheckIds(messageId, consumer);
        await using var cmd = Command(connection, null, $"SELECT {Fn("inbox_complete")}($1, $2, $3)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = token, NpgsqlDbType = NpgsqlDbType.Bigint });
        return (bool)(await cmd.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary><c>inbox_fail</c>, in autocommit.</summary>
    internal static async Task<bool> FailAsync(NpgsqlConnection connection, string messageId, string consumer,
        long token, string error, CancellationToken cancellationToken)
    {
        CheckIds(messageId, consumer);
        ArgumentNullException.ThrowIfNull(error);
        await using var cmd = Command(connection, null, $"SELECT {Fn("inbox_fail")}($1, $2, $3, $4)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = messageId, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = token, NpgsqlDbType = NpgsqlDbType.Bigint });
        cmd.Parameters.Add(new NpgsqlParameter { Value = error, NpgsqlDbType = NpgsqlDbType.Text });
        return (bool)(await cmd.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary><c>inbox_next</c>, in autocommit.</summary>
    internal static async Task<IReadOnlyList<NextClaim>> NextAsync(NpgsqlConnection connection, string consumer,
        TimeSpan? lease, int max, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(consumer);
        await using var cmd = Command(connection, null,
            $"SELECT message_id, token, attempts, payload::text FROM {Fn("inbox_next")}($1, $2, $3)");
        cmd.Parameters.Add(new NpgsqlParameter { Value = consumer, NpgsqlDbType = NpgsqlDbType.Text });
        cmd.Parameters.Add(new NpgsqlParameter { Value = (object?)lease ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Interval });
        cmd.Parameters.Add(new NpgsqlParameter { Value = max, NpgsqlDbType = NpgsqlDbType.Integer });
        var claims = new List<NextClaim>();
        await using var reader = await cmd.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
        {
            claims.Add(new NextClaim(reader.GetString(0), reader.GetInt64(1), reader.GetInt32(2),
                reader.IsDBNull(3) ? null : reader.GetString(3)));
        }
        return claims;
    }
}
