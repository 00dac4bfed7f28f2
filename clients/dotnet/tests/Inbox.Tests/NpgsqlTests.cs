using Npgsql;
using Xunit;

namespace Inbox.Tests;

/// <summary>The Npgsql entry points against the real extension.</summary>
[Collection(nameof(WithServers))]
public sealed class NpgsqlTests(Servers servers)
{
    private static string NewId() => Guid.NewGuid().ToString();

    [Fact]
    public async Task Claim_is_true_once_and_false_for_a_duplicate_and_rolls_back_with_the_transaction()
    {
        var id = NewId();
        await using var connection = await servers.DataSource.OpenConnectionAsync();

        await using (var rolledBack = await connection.BeginTransactionAsync())
        {
            Assert.True(await rolledBack.ClaimAsync(id, "npgsql"));
            Assert.False(await rolledBack.ClaimAsync(id, "npgsql"));   // inserted earlier in this transaction
            await rolledBack.RollbackAsync();
        }
        Assert.Equal(0, await servers.MarkersAsync(id, "npgsql"));     // the marker went with the rollback

        await using (var tx = await connection.BeginTransactionAsync())
        {
            Assert.True(await tx.ClaimAsync(id, "npgsql"));
            await tx.CommitAsync();
        }
        await using (var tx = await connection.BeginTransactionAsync())
        {
            Assert.False(await tx.ClaimAsync(id, "npgsql"));
            Assert.True(await tx.ClaimAsync(id, "npgsql-other"));      // another handler of the same message
            await tx.CommitAsync();
        }
        Assert.Equal("processed", await servers.StateAsync(id, "npgsql"));
    }

    [Fact]
    public async Task Claim_refuses_a_transaction_that_is_no_longer_open()
    {
        var id = NewId();
        await using var connection = await servers.DataSource.OpenConnectionAsync();
        var tx = await connection.BeginTransactionAsync();
        await tx.CommitAsync();
        await Assert.ThrowsAsync<InboxTransactionRequiredException>(() => tx.ClaimAsync(id, "npgsql"));
        Assert.Equal(0, await servers.MarkersAsync(id, "npgsql"));
    }

    [Fact]
    public async Task Claim_of_a_guid_stores_the_canonical_uuid()
    {
        var id = Guid.NewGuid();
        await using var connection = await servers.DataSource.OpenConnectionAsync();
        await using (var tx = await connection.BeginTransactionAsync())
        {
            Assert.True(await tx.ClaimAsync(id, "npgsql-uuid"));
            await tx.CommitAsync();
        }
        await using (var tx = await connection.BeginTransactionAsync())
        {
            Assert.False(await tx.ClaimAsync(id.ToString(), "npgsql-uuid"));   // the same text as Guid.ToString()
            await tx.RollbackAsync();
        }
    }

    [Fact]
    public async Task ClaimMany_returns_the_ids_this_call_claimed()
    {
        string a = NewId(), b = NewId(), c = NewId();
        await using var connection = await servers.DataSource.OpenConnectionAsync();
        await using (var tx = await connection.BeginTransactionAsync())
        {
            Assert.True(await tx.ClaimAsync(a, "npgsql-many"));
            await tx.CommitAsync();
        }
        await using (var tx = await connection.BeginTransactionAsync())
        {
            var claimed = await tx.ClaimManyAsync([a, b, c, b], "npgsql-many");
            Assert.Equal(new[] { b, c }.Order(), claimed.Order());
            await tx.CommitAsync();
        }
    }

    [Fact]
    public async Task Begin_reports_each_outcome_and_a_stale_owners_complete_returns_false()
    {
        var id = NewId();
        var ds = servers.DataSource;

        var first = await ds.BeginAsync(id, "npgsql-2pc", lease: TimeSpan.FromSeconds(2));
        Assert.Equal(BeginOutcome.Claimed, first.Outcome);
        Assert.True(first.MustWork);
        long stale = first.Token!.Value;

        var busy = await ds.BeginAsync(id, "npgsql-2pc");
        Assert.Equal(BeginOutcome.Busy, busy.Outcome);
        Assert.Null(busy.Token);
        Assert.InRange(busy.RetryAfter!.Value, TimeSpan.Zero, TimeSpan.FromSeconds(2));

        // The first owner pauses past its lease; another instance takes the message over.
        await servers.WaitForLeaseToExpireAsync(id, "npgsql-2pc");
        var takeover = await ds.BeginAsync(id, "npgsql-2pc", lease: TimeSpan.FromMinutes(1));
        Assert.Equal(BeginOutcome.TakenOver, takeover.Outcome);
        long current = takeover.Token!.Value;
        Assert.True(current > stale);

        Assert.False(await ds.ExtendAsync(id, "npgsql-2pc", stale));
        Assert.False(await ds.CompleteAsync(id, "npgsql-2pc", stale));   // the stale owner's work does not count
        Assert.True(await ds.ExtendAsync(id, "npgsql-2pc", current, TimeSpan.FromMinutes(1)));
        Assert.True(await ds.CompleteAsync(id, "npgsql-2pc", current));
        Assert.True(await ds.CompleteAsync(id, "npgsql-2pc", current));  // a repeat: the first reply may be lost

        var done = await ds.BeginAsync(id, "npgsql-2pc");
        Assert.Equal(BeginOutcome.Processed, done.Outcome);
        Assert.True(done.ShouldAck);
    }

    [Fact]
    public async Task Fail_releases_the_claim_for_the_sweeper_and_fails_it_when_attempts_are_used_up()
    {
        var id = NewId();
        var ds = servers.DataSource;
        await servers.ExecuteAsync("SELECT inbox.inbox_configure('npgsql-sweep', max_attempts => 2)");

        var begin = await ds.BeginAsync(id, "npgsql-sweep", payloadJson: """{"to": "a@example.com"}""");
        Assert.True(await ds.FailAsync(id, "npgsql-sweep", begin.Token!.Value, "smtp timeout"));

        var next = Assert.Single(await ds.NextAsync("npgsql-sweep", max: 10));
        Assert.Equal(id, next.MessageId);
        Assert.Equal(2, next.Attempts);
        Assert.True(next.Token > begin.Token);
        Assert.Contains("a@example.com", next.Payload!, StringComparison.Ordinal);

        Assert.True(await ds.FailAsync(id, "npgsql-sweep", next.Token, "smtp timeout again"));
        Assert.Equal("failed", await servers.StateAsync(id, "npgsql-sweep"));
        var after = await ds.BeginAsync(id, "npgsql-sweep");
        Assert.Equal(BeginOutcome.Failed, after.Outcome);
        Assert.True(after.ShouldAck);
    }

    /// <summary>The page's plain Npgsql handlers, each run twice with one message id.</summary>
    [Fact]
    public async Task The_pages_plain_Npgsql_handlers_count_once()
    {
        long account = await servers.NewAccountAsync();
        var id = NewId();
        await Inbox.Docs.PlainNpgsql.CreditAsync(servers.DataSource, id, account, 100, default);
        await Inbox.Docs.PlainNpgsql.CreditAsync(servers.DataSource, id, account, 100, default);
        Assert.Equal(100m, await servers.BalanceAsync(account));

        var emailer = new RecordingEmailer();
        Assert.True(await Inbox.Docs.PlainNpgsql.EmailAsync(servers.DataSource, id, emailer, default));
        Assert.True(await Inbox.Docs.PlainNpgsql.EmailAsync(servers.DataSource, id, emailer, default));   // processed: ack
        Assert.Single(emailer.Calls);
    }

    [Fact]
    public async Task Errors_map_to_the_readmes_actions()
    {
        await using var connection = await servers.DataSource.OpenConnectionAsync();
        await using var tx = await connection.BeginTransactionAsync();
        var empty = await Assert.ThrowsAsync<PostgresException>(() => tx.ClaimAsync("", "npgsql"));
        Assert.Equal(InboxAction.DeadLetter, InboxErrors.ActionFor(empty));

        Assert.Equal(InboxAction.Retry, InboxErrors.ActionFor("40001"));
        Assert.Equal(InboxAction.Retry, InboxErrors.ActionFor("40P01"));
        Assert.Equal(InboxAction.Redeliver, InboxErrors.ActionFor("55P03"));
        Assert.Equal(InboxAction.Reconnect, InboxErrors.ActionFor("25006"));
        Assert.Equal(InboxAction.Stop, InboxErrors.ActionFor("42501"));
        Assert.Equal(InboxAction.Unknown, InboxErrors.ActionFor("23505"));
        Assert.Equal(InboxAction.DeadLetter, InboxErrors.ActionFor(new InvalidOperationException("wrapped", empty)));
    }
}
