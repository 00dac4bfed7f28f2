using Npgsql;

namespace Inbox;

/// <summary>The inbox calls over Npgsql.</summary>
/// <remarks>
/// One-phase claims take the <see cref="NpgsqlTransaction"/> of the business change: the claim, the change
/// and the commit then share one transaction on one connection, which is what makes a message count once.
/// Two-phase calls take an <see cref="NpgsqlDataSource"/>: each runs on a connection of its own, in
/// autocommit, so the claim is visible to every other instance before the side effect starts.
/// </remarks>
public static class NpgsqlInboxExtensions
{
    private static NpgsqlConnection Open(NpgsqlTransaction transaction)
    {
        ArgumentNullException.ThrowIfNull(transaction);
        // A claim on a committed, rolled back or disposed transaction would run in autocommit,
        // outside the business transaction.
        // A completed transaction is refused where the command is made (InboxCommands.Command).
        return transaction.Connection ?? throw new InboxTransactionRequiredException(
            "inbox: the transaction is already committed, rolled back or disposed; a claim must run inside the open business transaction");
    }

    /// <summary>Claims a message for a consumer inside the business transaction (<c>inbox_claim</c>).</summary>
    /// <param name="transaction">The open transaction that also makes the business change.</param>
    /// <param name="messageId">The broker's id, the same on every delivery of the message.</param>
    /// <param name="consumer">The handler's name; one marker per (message, consumer).</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: this transaction owns the message, do the work; false: done before (or by a transaction
    /// that committed while this one waited), acknowledge and skip.</returns>
    /// <exception cref="InboxTransactionRequiredException">The transaction is no longer open.</exception>
    public static Task<bool> ClaimAsync(this NpgsqlTransaction transaction, string messageId, string consumer,
        CancellationToken cancellationToken = default)
        => InboxCommands.ClaimAsync(Open(transaction), transaction, messageId, consumer, cancellationToken);

    /// <summary>Claims a message whose id is a uuid (<c>inbox_claim(uuid, text)</c>, stored in canonical form).</summary>
    /// <param name="transaction">The open transaction that also makes the business change.</param>
    /// <param name="messageId">The broker's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: do the work; false: acknowledge and skip.</returns>
    /// <exception cref="InboxTransactionRequiredException">The transaction is no longer open.</exception>
    public static Task<bool> ClaimAsync(this NpgsqlTransaction transaction, Guid messageId, string consumer,
        CancellationToken cancellationToken = default)
        => InboxCommands.ClaimAsync(Open(transaction), transaction, messageId, consumer, cancellationToken);

    /// <summary>Claims a batch in one statement (<c>inbox_claim_many</c>), inside the business transaction.</summary>
    /// <param name="transaction">The open transaction.</param>
    /// <param name="messageIds">The ids; a repeated id counts once.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The ids this call claimed: process exactly those.</returns>
    /// <exception cref="InboxTransactionRequiredException">The transaction is no longer open.</exception>
    public static Task<IReadOnlyList<string>> ClaimManyAsync(this NpgsqlTransaction transaction,
        IEnumerable<string> messageIds, string consumer, CancellationToken cancellationToken = default)
        => InboxCommands.ClaimManyAsync(Open(transaction), transaction, messageIds, consumer, cancellationToken);

    /// <summary>Starts a two-phase claim and says what it found (<c>inbox_begin_outcome</c>), committed at once.</summary>
    /// <param name="dataSource">Where to run it; a pooled connection in autocommit.</param>
    /// <param name="messageId">The message's id (a <see cref="Guid"/>: pass <c>id.ToString()</c>, its canonical form).</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="lease">How long the claim holds before another instance may take it over; null: the
    /// consumer's configured lease, else <c>inbox.lease</c>.</param>
    /// <param name="payloadJson">Optional JSON stored for a sweeper (<see cref="NextAsync"/>).</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The outcome, with the token when this caller must do the work.</returns>
    public static async Task<BeginResult> BeginAsync(this NpgsqlDataSource dataSource, string messageId,
        string consumer, TimeSpan? lease = null, string? payloadJson = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        return await InboxCommands.BeginAsync(connection, messageId, consumer, lease, payloadJson, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Renews the lease from now if <paramref name="token"/> is still current (<c>inbox_extend</c>).</summary>
    /// <param name="dataSource">Where to run it.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The token <see cref="BeginAsync"/> gave.</param>
    /// <param name="lease">The new lease; null: the configured one.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost.</returns>
    public static async Task<bool> ExtendAsync(this NpgsqlDataSource dataSource, string messageId, string consumer,
        long token, TimeSpan? lease = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        return await InboxCommands.ExtendAsync(connection, messageId, consumer, token, lease, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Marks the claim processed if <paramref name="token"/> is current (<c>inbox_complete</c>); true
    /// again when repeated with the token that completed it.</summary>
    /// <param name="dataSource">Where to run it.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The token <see cref="BeginAsync"/> gave.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost: a stale owner, whose work must not count.</returns>
    public static async Task<bool> CompleteAsync(this NpgsqlDataSource dataSource, string messageId, string consumer,
        long token, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        return await InboxCommands.CompleteAsync(connection, messageId, consumer, token, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Records an error and releases the claim for retry, or fails it when its attempts are used
    /// up (<c>inbox_fail</c>).</summary>
    /// <param name="dataSource">Where to run it.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The token <see cref="BeginAsync"/> gave.</param>
    /// <param name="error">The error to record (cut to 8 kB).</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost.</returns>
    public static async Task<bool> FailAsync(this NpgsqlDataSource dataSource, string messageId, string consumer,
        long token, string error, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        return await InboxCommands.FailAsync(connection, messageId, consumer, token, error, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>For a sweeper: takes up to <paramref name="max"/> released and expired claims, oldest first,
    /// each with a new token (<c>inbox_next</c>).</summary>
    /// <param name="dataSource">Where to run it.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="lease">The new claims' lease; null: the configured one.</param>
    /// <param name="max">At most this many claims (1 to 10000).</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The claims taken; concurrent sweepers get disjoint ones.</returns>
    public static async Task<IReadOnlyList<NextClaim>> NextAsync(this NpgsqlDataSource dataSource, string consumer,
        TimeSpan? lease = null, int max = 10, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        return await InboxCommands.NextAsync(connection, consumer, lease, max, cancellationToken).ConfigureAwait(false);
    }
}
