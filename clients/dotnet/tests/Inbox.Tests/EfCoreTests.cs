using Inbox.Docs;
using Microsoft.EntityFrameworkCore;
using Xunit;

namespace Inbox.Tests;

/// <summary>The EF Core entry points, with docs/efcore.md's handlers.</summary>
[Collection(nameof(WithServers))]
public sealed class EfCoreTests(Servers servers)
{
    [Fact]
    public async Task ProcessOnce_applies_a_message_once_however_often_it_is_handled()
    {
        long account = await servers.NewAccountAsync();
        var id = Guid.NewGuid();
        var msg = new CreditRequested(account, 100);
        for (int i = 0; i < 3; i++)
        {
            await using var db = servers.NewContext();
            Assert.Equal(i == 0, await new CreditHandler(db).Handle(id, msg, default));
        }
        Assert.Equal(100m, await servers.BalanceAsync(account));
        Assert.Equal(1, await servers.MarkersAsync(id.ToString(), "credit"));
    }

    [Fact]
    public async Task ProcessOnce_rolls_the_claim_back_when_the_work_throws()
    {
        long account = await servers.NewAccountAsync();
        var id = Guid.NewGuid();
        await using (var db = servers.NewContext())
        {
            await Assert.ThrowsAsync<InvalidOperationException>(() => db.ProcessOnceAsync(id, "credit-throws", async ct =>
            {
                var a = await db.Accounts.SingleAsync(x => x.Id == account, ct);
                a.Balance += 100;
                await db.SaveChangesAsync(ct);
                throw new InvalidOperationException("the business change failed after the claim");
            }));
        }
        Assert.Equal(0, await servers.MarkersAsync(id.ToString(), "credit-throws"));
        Assert.Equal(0m, await servers.BalanceAsync(account));
        await using (var db = servers.NewContext())
        {
            Assert.True(await db.ProcessOnceAsync(id, "credit-throws", async ct =>
                (await db.Accounts.SingleAsync(x => x.Id == account, ct)).Balance += 100));
        }
        Assert.Equal(100m, await servers.BalanceAsync(account));
    }

    [Fact]
    public async Task Claim_on_a_context_without_a_transaction_is_refused()
    {
        var id = Guid.NewGuid();
        await using var db = servers.NewContext();
        await Assert.ThrowsAsync<InboxTransactionRequiredException>(() => db.Database.ClaimAsync(id, "credit"));
        Assert.Equal(0, await servers.MarkersAsync(id.ToString(), "credit"));

        // Inside the execution strategy and an explicit transaction it joins the transaction.
        await db.Database.CreateExecutionStrategy().ExecuteAsync(async () =>
        {
            await using var tx = await db.Database.BeginTransactionAsync();
            Assert.True(await db.Database.ClaimAsync(id, "credit"));
            await Assert.ThrowsAsync<InboxTransactionNotAllowedException>(() => db.Database.BeginAsync(id.ToString(), "email"));
            await tx.RollbackAsync();
        });
        Assert.Equal(0, await servers.MarkersAsync(id.ToString(), "credit"));
    }

    [Fact]
    public async Task HandWritten_inbox_of_the_articles_also_counts_once_without_bulk_updates()
    {
        long account = await servers.NewAccountAsync();
        var id = Guid.NewGuid();
        for (int i = 0; i < 2; i++)
        {
            await using var db = servers.NewContext();
            await new HandWrittenCreditHandler(db).Handle(id, new CreditRequested(account, 100), default);
        }
        Assert.Equal(100m, await servers.BalanceAsync(account));
    }

    /// <summary>The seeds' ExecuteUpdate trap: the hand-written handler's bulk update commits on its own, so
    /// the duplicate is "caught" and credited anyway; the same update inside ProcessOnceAsync joins the claim's
    /// transaction and counts once.</summary>
    [Fact]
    public async Task ExecuteUpdateTrap()
    {
        long trapped = await servers.NewAccountAsync();
        long safe = await servers.NewAccountAsync();
        var trappedId = Guid.NewGuid();
        var safeId = Guid.NewGuid();
        for (int i = 0; i < 2; i++)
        {
            await using (var db = servers.NewContext())
                await new HandWrittenBulkCreditHandler(db).Handle(trappedId, new CreditRequested(trapped, 100), default);
            await using (var db = servers.NewContext())
                Assert.Equal(i == 0, await new BulkCreditHandler(db).Handle(safeId, new CreditRequested(safe, 100), default));
        }
        Assert.Equal(200m, await servers.BalanceAsync(trapped));   // the trap: the duplicate was credited
        Assert.Equal(100m, await servers.BalanceAsync(safe));
    }

    [Fact]
    public async Task TwoPhase_calls_on_a_context()
    {
        var id = Guid.NewGuid().ToString();
        await using var db = servers.NewContext();
        var begin = await db.Database.BeginAsync(id, "ef-2pc", TimeSpan.FromMinutes(1));
        Assert.Equal(BeginOutcome.Claimed, begin.Outcome);
        Assert.Equal(BeginOutcome.Busy, (await db.Database.BeginAsync(id, "ef-2pc")).Outcome);
        Assert.True(await db.Database.ExtendAsync(id, "ef-2pc", begin.Token!.Value));
        Assert.True(await db.Database.CompleteAsync(id, "ef-2pc", begin.Token!.Value));
        Assert.Equal(BeginOutcome.Processed, (await db.Database.BeginAsync(id, "ef-2pc")).Outcome);
        Assert.Empty(await db.Database.NextAsync("ef-2pc"));
    }
}
