using Microsoft.EntityFrameworkCore;
using Microsoft.EntityFrameworkCore.Infrastructure;
using Microsoft.EntityFrameworkCore.Storage;
using Npgsql;

namespace Inbox;

/// <summary>The inbox calls on an EF Core <see cref="DbContext"/> (Npgsql provider).</summary>
/// <remarks>
/// <para>A one-phase claim joins the context's current transaction and refuses to run without one:
/// <c>SaveChangesAsync</c> opens its own transaction only around its own commands, and
/// <c>ExecuteUpdateAsync</c>, <c>ExecuteDeleteAsync</c> and raw SQL commit on their own, so a claim made
/// beside them without an explicit transaction commits alone and loses the message when the rest fails.</para>
/// <para><c>ProcessOnceAsync</c> does it all: it opens the transaction inside the execution strategy
/// (as EF Core requires with <c>EnableRetryOnFailure</c>), claims, runs the work, saves and commits; a retry
/// runs all of it again on a cleared change tracker.</para>
/// <para>Two-phase calls refuse to run inside a transaction: each commits on its own.</para>
/// </remarks>
public static class DbContextInboxExtensions
{
    private static (NpgsqlConnection Connection, NpgsqlTransaction Transaction) Joined(DatabaseFacade database)
    {
        ArgumentNullException.ThrowIfNull(database);
        var current = database.CurrentTransaction ?? throw new InboxTransactionRequiredException(
            "inbox: no transaction is open on this DbContext; call Database.BeginTransactionAsync first, or use " +
            "ProcessOnceAsync (a claim committed on its own loses the message when the business change fails)");
        if (current.GetDbTransaction() is not NpgsqlTransaction transaction || transaction.Connection is null)
            throw new InboxTransactionRequiredException("inbox: the context's transaction is not an open Npgsql transaction");
        return (transaction.Connection, transaction);
    }

    private static void NoTransaction(DatabaseFacade database)
    {
        ArgumentNullException.ThrowIfNull(database);
        if (database.CurrentTransaction is not null)
            throw new InboxTransactionNotAllowedException();
    }

    /// <summary>Claims a message inside the context's current transaction (<c>inbox_claim</c>).</summary>
    /// <param name="database">The context's <see cref="DbContext.Database"/>, with a transaction open.</param>
    /// <param name="messageId">The broker's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: do the work; false: done before, acknowledge and skip.</returns>
    /// <exception cref="InboxTransactionRequiredException">No transaction is open on the context.</exception>
    public static Task<bool> ClaimAsync(this DatabaseFacade database, string messageId, string consumer,
        CancellationToken cancellationToken = default)
    {
        var (connection, transaction) = Joined(database);
        return InboxCommands.ClaimAsync(connection, transaction, messageId, consumer, cancellationToken);
    }

    /// <summary>Claims a message whose id is a uuid inside the context's current transaction.</summary>
    /// <param name="database">The context's <see cref="DbContext.Database"/>, with a transaction open.</param>
    /// <param name="messageId">The broker's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: do the work; false: done before, acknowledge and skip.</returns>
    /// <exception cref="InboxTransactionRequiredException">No transaction is open on the context.</exception>
    public static Task<bool> ClaimAsync(this DatabaseFacade database, Guid messageId, string consumer,
        CancellationToken cancellationToken = default)
    {
        var (connection, transaction) = Joined(database);
        return InboxCommands.ClaimAsync(connection, transaction, messageId, consumer, cancellationToken);
    }

    /// <summary>Claims a batch in one statement inside the context's current transaction (<c>inbox_claim_many</c>).</summary>
    /// <param name="database">The context's <see cref="DbContext.Database"/>, with a transaction open.</param>
    /// <param name="messageIds">The ids; a repeated id counts once.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The ids this call claimed: process exactly those.</returns>
    /// <exception cref="InboxTransactionRequiredException">No transaction is open on the context.</exception>
    public static Task<IReadOnlyList<string>> ClaimManyAsync(this DatabaseFacade database,
        IEnumerable<string> messageIds, string consumer, CancellationToken cancellationToken = default)
    {
        var (connection, transaction) = Joined(database);
        return InboxCommands.ClaimManyAsync(connection, transaction, messageIds, consumer, cancellationToken);
    }

    /// <summary>Processes a message once: in one transaction, run under the context's execution strategy,
    /// claims it, runs <paramref name="work"/>, saves the context's changes and commits. A duplicate commits
    /// nothing and skips the work.</summary>
    /// <param name="context">The context the work changes. Its change tracker is cleared before each attempt.</param>
    /// <param name="messageId">The broker's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="work">The business change. It may call <c>SaveChangesAsync</c>, <c>ExecuteUpdateAsync</c>
    /// or raw SQL: all of it joins the transaction. It runs again if the execution strategy retries.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: processed now; false: a duplicate. Acknowledge the message on both.</returns>
    /// <remarks>A commit whose answer was lost is safe to retry here: the retry's claim finds the committed
    /// marker and answers false.</remarks>
    public static Task<bool> ProcessOnceAsync(this DbContext context, Guid messageId, string consumer,
        Func<CancellationToken, Task> work, CancellationToken cancellationToken = default)
        => ProcessOnceAsync(context, (db, ct) => db.ClaimAsync(messageId, consumer, ct), work, cancellationToken);

    /// <summary>Processes a message with a text id once; see the <c>Guid</c> overload.</summary>
    /// <param name="context">The context the work changes.</param>
    /// <param name="messageId">The broker's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="work">The business change.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>True: processed now; false: a duplicate.</returns>
    public static Task<bool> ProcessOnceAsync(this DbContext context, string messageId, string consumer,
        Func<CancellationToken, Task> work, CancellationToken cancellationToken = default)
        => ProcessOnceAsync(context, (db, ct) => db.ClaimAsync(messageId, consumer, ct), work, cancellationToken);

    private static Task<bool> ProcessOnceAsync(DbContext context, Func<DatabaseFacade, CancellationToken, Task<bool>> claim,
        Func<CancellationToken, Task> work, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(context);
        ArgumentNullException.ThrowIfNull(work);
        NoTransaction(context.Database);
        var strategy = context.Database.CreateExecutionStrategy();
        return strategy.ExecuteAsync(async ct =>
        {
            context.ChangeTracker.Clear();     // a retry starts from what the database holds
            await using var transaction = await context.Database.BeginTransactionAsync(ct).ConfigureAwait(false);
            if (!await claim(context.Database, ct).ConfigureAwait(false))
            {
                await transaction.CommitAsync(ct).ConfigureAwait(false);
                return false;
            }
            await work(ct).ConfigureAwait(false);
            await context.SaveChangesAsync(ct).ConfigureAwait(false);
            await transaction.CommitAsync(ct).ConfigureAwait(false);
            return true;
        }, cancellationToken);
    }

    private static Task<T> TwoPhase<T>(DatabaseFacade database, Func<NpgsqlConnection, CancellationToken, Task<T>> call,
        CancellationToken cancellationToken)
    {
        NoTransaction(database);
        return database.CreateExecutionStrategy().ExecuteAsync(async ct =>
        {
            await database.OpenConnectionAsync(ct).ConfigureAwait(false);
            try
            {
                return await call((NpgsqlConnection)database.GetDbConnection(), ct).ConfigureAwait(false);
            }
            finally
            {
                await database.CloseConnectionAsync().ConfigureAwait(false);
            }
        }, cancellationToken);
    }

    /// <summary>Starts a two-phase claim (<c>inbox_begin_outcome</c>), committed at once.</summary>
    /// <param name="database">The context's <see cref="DbContext.Database"/>, with no transaction open.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="lease">The claim's lease; null: the configured one.</param>
    /// <param name="payloadJson">Optional JSON stored for a sweeper.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The outcome, with the token when this caller must do the work. Retried by the execution
    /// strategy, a begin whose answer was lost answers <see cref="BeginOutcome.Busy"/>: the message comes
    /// back after the lease.</returns>
    /// <exception cref="InboxTransactionNotAllowedException">A transaction is open on the context.</exception>
    public static Task<BeginResult> BeginAsync(this DatabaseFacade database, string messageId, string consumer,
        TimeSpan? lease = null, string? payloadJson = null, CancellationToken cancellationToken = default)
        => TwoPhase(database, (c, ct) => InboxCommands.BeginAsync(c, messageId, consumer, lease, payloadJson, ct), cancellationToken);

    /// <summary>Renews the lease if <paramref name="token"/> is current (<c>inbox_extend</c>).</summary>
    /// <param name="database">The context's database facade, with no transaction open.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The claim's token.</param>
    /// <param name="lease">The new lease; null: the configured one.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost.</returns>
    public static Task<bool> ExtendAsync(this DatabaseFacade database, string messageId, string consumer, long token,
        TimeSpan? lease = null, CancellationToken cancellationToken = default)
        => TwoPhase(database, (c, ct) => InboxCommands.ExtendAsync(c, messageId, consumer, token, lease, ct), cancellationToken);

    /// <summary>Marks the claim processed if <paramref name="token"/> is current (<c>inbox_complete</c>).</summary>
    /// <param name="database">The context's database facade, with no transaction open.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The claim's token.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost.</returns>
    public static Task<bool> CompleteAsync(this DatabaseFacade database, string messageId, string consumer, long token,
        CancellationToken cancellationToken = default)
        => TwoPhase(database, (c, ct) => InboxCommands.CompleteAsync(c, messageId, consumer, token, ct), cancellationToken);

    /// <summary>Records an error and releases the claim, or fails it for good (<c>inbox_fail</c>).</summary>
    /// <param name="database">The context's database facade, with no transaction open.</param>
    /// <param name="messageId">The message's id.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="token">The claim's token.</param>
    /// <param name="error">The error to record.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>False when ownership was lost.</returns>
    public static Task<bool> FailAsync(this DatabaseFacade database, string messageId, string consumer, long token,
        string error, CancellationToken cancellationToken = default)
        => TwoPhase(database, (c, ct) => InboxCommands.FailAsync(c, messageId, consumer, token, error, ct), cancellationToken);

    /// <summary>For a sweeper: takes released and expired claims with new tokens (<c>inbox_next</c>).</summary>
    /// <param name="database">The context's database facade, with no transaction open.</param>
    /// <param name="consumer">The handler's name.</param>
    /// <param name="lease">The new claims' lease; null: the configured one.</param>
    /// <param name="max">At most this many claims.</param>
    /// <param name="cancellationToken">Cancels the call.</param>
    /// <returns>The claims taken.</returns>
    public static Task<IReadOnlyList<NextClaim>> NextAsync(this DatabaseFacade database, string consumer,
        TimeSpan? lease = null, int max = 10, CancellationToken cancellationToken = default)
        => TwoPhase(database, (c, ct) => InboxCommands.NextAsync(c, consumer, lease, max, ct), cancellationToken);
}
