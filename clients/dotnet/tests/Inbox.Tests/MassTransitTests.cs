using System.Collections.Concurrent;
using System.Diagnostics.Metrics;
using Inbox.Docs;
using MassTransit;
using Microsoft.EntityFrameworkCore;
using Microsoft.Extensions.DependencyInjection;
using Xunit;
using Xunit.Abstractions;

namespace Inbox.Tests;

/// <summary>An e-mailer that records every call; it may be told to wait for a signal first.</summary>
public sealed class RecordingEmailer : IEmailer
{
    private int failuresLeft;

    public RecordingEmailer(int failFirst = 0) => failuresLeft = failFirst;

    public ConcurrentQueue<(string Key, long Token)> Calls { get; } = new();

    public Task SendAsync(string recipient, string body, string idempotencyKey, long fencingToken, CancellationToken ct)
    {
        Calls.Enqueue((idempotencyKey, fencingToken));
        if (Interlocked.Decrement(ref failuresLeft) >= 0)
            throw new InvalidOperationException("smtp timeout");
        return Task.CompletedTask;
    }
}

/// <summary>A credit consumer that throws after its change on the first delivery of each message, and
/// records what it saw of committed markers when the message came back.</summary>
public sealed class FlakyCreditConsumer(AppDbContext db, FlakyCreditConsumer.Probe probe) : IConsumer<CreditRequested>
{
    public sealed class Probe(Servers servers, string consumer)
    {
        public Servers Servers { get; } = servers;
        public string Consumer { get; } = consumer;
        public ConcurrentDictionary<Guid, int> Attempts { get; } = new();
        public ConcurrentDictionary<Guid, long> MarkersSeenOnRetry { get; } = new();
    }

    public async Task Consume(ConsumeContext<CreditRequested> context)
    {
        var id = context.MessageId!.Value;
        int attempt = probe.Attempts.AddOrUpdate(id, 1, (_, n) => n + 1);
        if (attempt > 1)   // from another session: what did the failed attempt leave committed?
            probe.MarkersSeenOnRetry[id] = await probe.Servers.MarkersAsync(id.ToString(), probe.Consumer);
        var msg = context.Message;
        await db.Accounts.Where(a => a.Id == msg.AccountId)
            .ExecuteUpdateAsync(s => s.SetProperty(a => a.Balance, a => a.Balance + msg.Amount), context.CancellationToken);
        db.Ledger.Add(new LedgerEntry { MessageId = id, AccountId = msg.AccountId, Amount = msg.Amount });
        await db.SaveChangesAsync(context.CancellationToken);
        if (attempt == 1)
            throw new InvalidOperationException("crash after the claim and the change, before the commit");
    }
}

/// <summary>Counts one of the filters' metrics for one consumer, and completes a task when it first moves.</summary>
public sealed class MetricWatch : IDisposable
{
    private readonly MeterListener listener = new();
    private readonly TaskCompletionSource seen = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private long count;

    public MetricWatch(string instrument, string consumer)
    {
        listener.InstrumentPublished = (i, l) =>
        {
            if (i.Meter.Name == InboxDiagnostics.MeterName && i.Name == instrument)
                l.EnableMeasurementEvents(i);
        };
        listener.SetMeasurementEventCallback<long>((_, value, tags, _) =>
        {
            foreach (var tag in tags)
            {
                if (tag.Key == "inbox.consumer" && (string?)tag.Value == consumer)
                {
                    Interlocked.Add(ref count, value);
                    seen.TrySetResult();
                }
            }
        });
        listener.Start();
    }

    public long Count => Interlocked.Read(ref count);
    public Task Seen => seen.Task.WaitAsync(TimeSpan.FromSeconds(60));
    public void Dispose() => listener.Dispose();
}

/// <summary>The MassTransit filters, over a real RabbitMQ, with docs/efcore.md's consumers and configuration.</summary>
[Collection(nameof(WithServers))]
public sealed class MassTransitTests(Servers servers, ITestOutputHelper output)
{
    /// <summary>Two instances configured exactly as the page configures them (AddMessaging) share the
    /// "credit" queue; every message is sent twice with one MessageId, so copies race on both instances.
    /// Every credit must be applied exactly once.</summary>
    [Fact]
    public async Task Two_instances_receive_every_message_twice_and_apply_each_once()
    {
        const int messages = 60;
        using var duplicates = new MetricWatch("inbox.duplicates", "credit");
        var emailer = new RecordingEmailer();
        void Configure(IServiceCollection s)
        {
            s.AddSingleton<IEmailer>(emailer);
            s.AddMessaging(servers.ConnectionString, servers.RabbitMq);
        }
        await using var a = await Instance.StartAsync(Configure);
        await using var b = await Instance.StartAsync(Configure);

        var accounts = new long[4];
        for (int i = 0; i < accounts.Length; i++)
            accounts[i] = await servers.NewAccountAsync();
        var sent = new List<(Guid Id, long Account, decimal Amount)>();
        for (int i = 0; i < messages; i++)
        {
            var id = Guid.NewGuid();
            var msg = new CreditRequested(accounts[i % accounts.Length], i + 1);
            sent.Add((id, msg.AccountId, msg.Amount));
            await a.SendAsync("credit", msg, id);
            await b.SendAsync("credit", msg, id);   // the duplicate: a producer's retry
        }
        await WhenAllDelivered(2 * messages, a, b);

        output.WriteLine($"deliveries: instance A {a.Deliveries.Done}, instance B {b.Deliveries.Done}; duplicates acked {duplicates.Count}");
        Assert.True(a.Deliveries.Done > 0 && b.Deliveries.Done > 0, "both instances must have consumed");
        Assert.Equal(0, a.Deliveries.Faults + b.Deliveries.Faults);
        Assert.Equal(messages, duplicates.Count);
        foreach (var account in accounts)
        {
            decimal expected = sent.Where(s => s.Account == account).Sum(s => s.Amount);
            Assert.Equal(expected, await servers.BalanceAsync(account));
        }
        var ids = sent.Select(s => s.Id).ToArray();
        Assert.Equal(messages, await servers.ScalarAsync<long>(
            "SELECT count(*) FROM \"Ledger\" WHERE \"MessageId\" = ANY($1)", (object)ids));
        Assert.Equal(messages, await servers.ScalarAsync<long>(
            "SELECT count(*) FROM inbox.inbox WHERE consumer = 'credit' AND state = 'processed' AND message_id = ANY($1)",
            (object)ids.Select(i => i.ToString()).ToArray()));
        Assert.Equal(0u, await servers.ReadyMessagesAsync("credit_error"));
    }

    /// <summary>The consumer throws after the claim and its change: the claim rolls back with the change
    /// (another session sees no marker when the message comes back), and the retry applies it once.</summary>
    [Fact]
    public async Task A_consumer_that_throws_after_the_claim_leaves_no_marker_and_is_retried()
    {
        const string queue = "credit-flaky";
        const int messages = 5;
        var probe = new FlakyCreditConsumer.Probe(servers, queue);
        await using var instance = await Instance.StartAsync(s =>
        {
            s.AddSingleton(probe);
            s.AddDbContext<AppDbContext>(o => o.UseNpgsql(servers.ConnectionString, n => n.EnableRetryOnFailure()));
            s.AddInbox<AppDbContext>();
            s.AddMassTransit(x =>
            {
                x.AddConsumer<FlakyCreditConsumer>();
                x.UsingRabbitMq((context, cfg) =>
                {
                    cfg.Host(servers.RabbitMq);
                    cfg.ReceiveEndpoint(queue, e =>
                    {
                        e.UseMessageRetry(r => r.Immediate(2));
                        e.ConfigureConsumer<FlakyCreditConsumer>(context, c => c.UseInbox(queue));
                    });
                });
            });
        });

        long account = await servers.NewAccountAsync();
        var ids = Enumerable.Range(0, messages).Select(_ => Guid.NewGuid()).ToArray();
        foreach (var id in ids)
            await instance.SendAsync(queue, new CreditRequested(account, 10), id);
        await WhenAllDelivered(messages, instance);

        foreach (var id in ids)
        {
            Assert.Equal(2, probe.Attempts[id]);
            Assert.Equal(0, probe.MarkersSeenOnRetry[id]);
            Assert.Equal("processed", await servers.StateAsync(id.ToString(), queue));
        }
        Assert.Equal(10m * messages, await servers.BalanceAsync(account));
        Assert.Equal(0u, await servers.ReadyMessagesAsync(queue + "_error"));
    }

    private static Task<Instance> StartTwoPhaseAsync(Servers servers, string queue, RecordingEmailer emailer, int retries = 0)
        => Instance.StartAsync(s =>
        {
            s.AddSingleton<IEmailer>(emailer);
            s.AddDbContext<AppDbContext>(o => o.UseNpgsql(servers.ConnectionString, n => n.EnableRetryOnFailure()));
            s.AddInbox<AppDbContext>();
            s.AddMassTransit(x =>
            {
                x.AddConsumer<SendReceiptConsumer>();
                x.UsingRabbitMq((context, cfg) =>
                {
                    cfg.Host(servers.RabbitMq);
                    cfg.ReceiveEndpoint(queue, e =>
                    {
                        if (retries > 0)
                            e.UseMessageRetry(r => r.Immediate(retries));
                        e.ConfigureConsumer<SendReceiptConsumer>(context,
                            c => c.UseInboxTwoPhase(queue, lease: TimeSpan.FromSeconds(30)));
                    });
                });
            });
        });

    /// <summary>A live claim elsewhere holds the message: the delivery is held, never acked. When this
    /// instance stops meanwhile, the message is back in the queue; when the holder has completed, the next
    /// delivery is acked without calling the consumer.</summary>
    [Fact]
    public async Task Busy_is_not_acked_and_comes_back_and_a_processed_message_is_acked_without_the_consumer()
    {
        const string queue = "email-busy";
        var id = Guid.NewGuid();
        var holder = await servers.DataSource.BeginAsync(id.ToString(), queue, lease: TimeSpan.FromSeconds(20));
        Assert.Equal(BeginOutcome.Claimed, holder.Outcome);

        var emailer = new RecordingEmailer();
        using var busy = new MetricWatch("inbox.busy", queue);
        await using (var first = await StartTwoPhaseAsync(servers, queue, emailer))
        {
            await first.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
            await busy.Seen;
            await first.StopAsync();     // this instance goes away while the message is busy
        }
        Assert.Empty(emailer.Calls);
        Assert.Equal(1u, await servers.ReadyMessagesAsync(queue));          // not acked: back in the queue
        Assert.Equal(0u, await servers.ReadyMessagesAsync(queue + "_error"));

        Assert.True(await servers.DataSource.CompleteAsync(id.ToString(), queue, holder.Token!.Value));
        await using var second = await StartTwoPhaseAsync(servers, queue, emailer);
        await WhenAllDelivered(1, second);
        Assert.Empty(emailer.Calls);                                        // processed: acked, not sent again
        await second.StopAsync();
        Assert.Equal(0u, await servers.ReadyMessagesAsync(queue));
    }

    /// <summary>A holder dies: its lease runs out while the delivery is held busy; the filter then takes the
    /// claim over with a higher token, the consumer sends once, and the dead holder's completion is refused.</summary>
    [Fact]
    public async Task Busy_is_taken_over_when_the_holders_lease_runs_out_and_the_stale_holder_cannot_complete()
    {
        const string queue = "email-takeover";
        var id = Guid.NewGuid();
        var emailer = new RecordingEmailer();
        using var busy = new MetricWatch("inbox.busy", queue);
        await using var instance = await StartTwoPhaseAsync(servers, queue, emailer);
        // Long enough for the delivery to meet the live claim on a loaded machine.
        var holder = await servers.DataSource.BeginAsync(id.ToString(), queue, lease: TimeSpan.FromSeconds(5));
        Assert.Equal(BeginOutcome.Claimed, holder.Outcome);

        await instance.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
        await WhenAllDelivered(1, instance);

        Assert.True(busy.Count >= 1);
        var call = Assert.Single(emailer.Calls);
        Assert.Equal(id.ToString(), call.Key);
        Assert.True(call.Token > holder.Token);
        Assert.False(await servers.DataSource.CompleteAsync(id.ToString(), queue, holder.Token!.Value));
        Assert.Equal("processed", await servers.StateAsync(id.ToString(), queue));
    }

    /// <summary>Sent twice, a two-phase message is sent by the consumer once.</summary>
    [Fact]
    public async Task TwoPhase_duplicate_is_acked_without_calling_the_consumer()
    {
        const string queue = "email-twice";
        var id = Guid.NewGuid();
        var emailer = new RecordingEmailer();
        await using var instance = await StartTwoPhaseAsync(servers, queue, emailer);
        await instance.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
        await WhenAllDelivered(1, instance);
        await instance.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
        await WhenAllDelivered(2, instance);
        Assert.Single(emailer.Calls);
        Assert.Equal("processed", await servers.StateAsync(id.ToString(), queue));
    }

    /// <summary>The side effect throws: inbox_fail records the error and releases the claim, and the retry
    /// takes it over with a higher token and completes it.</summary>
    [Fact]
    public async Task TwoPhase_consumer_that_throws_is_released_and_the_retry_takes_it_over()
    {
        const string queue = "email-retry";
        var id = Guid.NewGuid();
        var emailer = new RecordingEmailer(failFirst: 1);
        await using var instance = await StartTwoPhaseAsync(servers, queue, emailer, retries: 2);
        await instance.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
        await WhenAllDelivered(1, instance);

        var calls = emailer.Calls.ToArray();
        Assert.Equal(2, calls.Length);
        Assert.True(calls[1].Token > calls[0].Token);
        Assert.Equal("processed", await servers.StateAsync(id.ToString(), queue));
        Assert.Equal("smtp timeout", await servers.ScalarAsync<string>(
            "SELECT last_error FROM inbox.inbox WHERE message_id = $1 AND consumer = $2", id.ToString(), queue));
        Assert.Equal(0u, await servers.ReadyMessagesAsync(queue + "_error"));
    }

    /// <summary>Attempts used up: the claim fails for good, and the next delivery is acked without the consumer.</summary>
    [Fact]
    public async Task TwoPhase_failed_for_good_is_acked_without_calling_the_consumer()
    {
        const string queue = "email-failed";
        await servers.ExecuteAsync("SELECT inbox.inbox_configure($1, max_attempts => 1)", queue);
        var id = Guid.NewGuid();
        var emailer = new RecordingEmailer(failFirst: 1);
        await using var instance = await StartTwoPhaseAsync(servers, queue, emailer, retries: 2);
        await instance.SendAsync(queue, new SendReceipt("a@example.com", "receipt"), id);
        await WhenAllDelivered(1, instance);

        Assert.Single(emailer.Calls);                                   // the retry found it failed: acked
        Assert.Equal("failed", await servers.StateAsync(id.ToString(), queue));
        Assert.Equal(0u, await servers.ReadyMessagesAsync(queue + "_error"));
    }

    private static async Task WhenAllDelivered(int total, params Instance[] instances)
    {
        // Each instance's deliveries complete a task; wait until their sum reaches total.
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(120);
        while (true)
        {
            int done = instances.Sum(i => i.Deliveries.Done);
            if (done >= total)
                return;
            var remaining = deadline - DateTime.UtcNow;
            if (remaining <= TimeSpan.Zero)
                throw new TimeoutException($"{done} of {total} deliveries finished");
            // Wake on the next delivery of any instance.
            await Task.WhenAny(instances.Select(i => i.Deliveries.WhenAsync(i.Deliveries.Done + 1, TimeSpan.FromDays(1))))
                .WaitAsync(remaining).ContinueWith(_ => { }, TaskScheduler.Default);
        }
    }
}
