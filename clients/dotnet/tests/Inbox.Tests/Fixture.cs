using Inbox.Docs;
using MassTransit;
using Microsoft.EntityFrameworkCore;
using Microsoft.EntityFrameworkCore.Infrastructure;
using Microsoft.EntityFrameworkCore.Storage;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Npgsql;
using RabbitMQ.Client;
using RabbitMQ.Client.Exceptions;
using Xunit;

[assembly: CollectionBehavior(DisableTestParallelization = true)]

namespace Inbox.Tests;

/// <summary>A database of its own on the server scripts/test-dotnet started (INBOX_TEST_PG), with the
/// extension created as the README creates it (schema inbox) and docs/efcore.md's tables; and the
/// broker it started (INBOX_TEST_AMQP).</summary>
public sealed class Servers : IAsyncLifetime
{
    private static long nextAccount = 1000;

    public string ConnectionString { get; private set; } = "";
    public NpgsqlDataSource DataSource { get; private set; } = null!;
    public Uri RabbitMq { get; } = new(Environment.GetEnvironmentVariable("INBOX_TEST_AMQP")
        ?? throw new InvalidOperationException("INBOX_TEST_AMQP is not set: run the tests with make test-dotnet"));

    public async Task InitializeAsync()
    {
        var admin = Environment.GetEnvironmentVariable("INBOX_TEST_PG")
            ?? throw new InvalidOperationException("INBOX_TEST_PG is not set: run the tests with make test-dotnet");
        var name = "inbox_dotnet_" + Guid.NewGuid().ToString("N")[..8];
        await using (var connection = new NpgsqlConnection(admin))
        {
            await connection.OpenAsync();
            await using var create = new NpgsqlCommand($"CREATE DATABASE {name}", connection);
            await create.ExecuteNonQueryAsync();
        }
        ConnectionString = new NpgsqlConnectionStringBuilder(admin) { Database = name }.ToString();
        DataSource = NpgsqlDataSource.Create(ConnectionString);
        await ExecuteAsync("CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox");
        await using var db = NewContext();
        await db.GetService<IRelationalDatabaseCreator>().CreateTablesAsync();
    }

    public async Task DisposeAsync() => await DataSource.DisposeAsync();

    /// <summary>A context as the page configures it: Npgsql with EnableRetryOnFailure.</summary>
    public AppDbContext NewContext() => new(new DbContextOptionsBuilder<AppDbContext>()
        .UseNpgsql(ConnectionString, o => o.EnableRetryOnFailure()).Options);

    public async Task ExecuteAsync(string sql, params object[] args)
    {
        await using var cmd = DataSource.CreateCommand(sql);
        foreach (var a in args)
            cmd.Parameters.Add(new NpgsqlParameter { Value = a });
        await cmd.ExecuteNonQueryAsync();
    }

    public async Task<T> ScalarAsync<T>(string sql, params object[] args)
    {
        await using var cmd = DataSource.CreateCommand(sql);
        foreach (var a in args)
            cmd.Parameters.Add(new NpgsqlParameter { Value = a });
        return (T)(await cmd.ExecuteScalarAsync())!;
    }

    /// <summary>A new account with a zero balance.</summary>
    public async Task<long> NewAccountAsync()
    {
        long id = Interlocked.Increment(ref nextAccount);
        await ExecuteAsync("INSERT INTO \"Accounts\" (\"Id\", \"Balance\") VALUES ($1, 0)", id);
        return id;
    }

    public Task<decimal> BalanceAsync(long account)
        => ScalarAsync<decimal>("SELECT \"Balance\" FROM \"Accounts\" WHERE \"Id\" = $1", account);

    /// <summary>Committed markers of a message, any consumer (what another session sees).</summary>
    public Task<long> MarkersAsync(string messageId, string consumer)
        => ScalarAsync<long>("SELECT count(*) FROM inbox.inbox WHERE message_id = $1 AND consumer = $2", messageId, consumer);

    public Task<string> StateAsync(string messageId, string consumer)
        => ScalarAsync<string>("SELECT state::text FROM inbox.inbox WHERE message_id = $1 AND consumer = $2", messageId, consumer);

    /// <summary>Waits, on the database's clock, until the claim's lease has run out: a paused owner's view.</summary>
    public Task WaitForLeaseToExpireAsync(string messageId, string consumer)
        => ExecuteAsync("SELECT pg_sleep(greatest(0, extract(epoch FROM lease_until - clock_timestamp())) + 0.01) " +
                        "FROM inbox.inbox WHERE message_id = $1 AND consumer = $2", messageId, consumer);

    /// <summary>Ready messages in a queue, or 0 if it does not exist. Unacknowledged deliveries are not counted:
    /// call it with no consumer on the queue.</summary>
    public async Task<uint> ReadyMessagesAsync(string queue)
    {
        var factory = new ConnectionFactory { Uri = RabbitMq };
        await using var connection = await factory.CreateConnectionAsync();
        await using var channel = await connection.CreateChannelAsync();
        try
        {
            var ok = await channel.QueueDeclarePassiveAsync(queue);
            return ok.MessageCount;
        }
        catch (OperationInterruptedException e) when (e.ShutdownReason?.ReplyCode == 404)
        {
            return 0;
        }
    }
}

[CollectionDefinition(nameof(WithServers))]
public sealed class WithServers : ICollectionFixture<Servers>;

/// <summary>Counts deliveries that finished (acked, or faulted) on a bus, and completes when a number is reached.</summary>
public sealed class Deliveries : IReceiveObserver
{
    private int done;
    private int faults;
    private readonly object gate = new();
    private readonly List<(int Target, TaskCompletionSource Reached)> waiters = [];

    public int Done => Volatile.Read(ref done);
    public int Faults => Volatile.Read(ref faults);

    public Task WhenAsync(int target) => WhenAsync(target, TimeSpan.FromSeconds(90));

    public Task WhenAsync(int target, TimeSpan timeout)
    {
        lock (gate)
        {
            if (done >= target)
                return Task.CompletedTask;
            var tcs = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            waiters.Add((target, tcs));
            return tcs.Task.WaitAsync(timeout);
        }
    }

    private void Finished()
    {
        lock (gate)
        {
            done++;
            foreach (var w in waiters.Where(w => done >= w.Target).ToList())
            {
                w.Reached.TrySetResult();
                waiters.Remove(w);
            }
        }
    }

    public Task PreReceive(ReceiveContext context) => Task.CompletedTask;
    public Task PostReceive(ReceiveContext context)
    {
        Finished();
        return Task.CompletedTask;
    }
    public Task PostConsume<T>(ConsumeContext<T> context, TimeSpan duration, string consumerType) where T : class => Task.CompletedTask;
    public Task ConsumeFault<T>(ConsumeContext<T> context, TimeSpan duration, string consumerType, Exception exception) where T : class => Task.CompletedTask;
    public Task ReceiveFault(ReceiveContext context, Exception exception)
    {
        Interlocked.Increment(ref faults);
        Finished();
        return Task.CompletedTask;
    }
}

/// <summary>One consumer instance: its own service provider and bus, as a separate process would have.</summary>
public sealed class Instance : IAsyncDisposable
{
    private readonly ServiceProvider services;
    private bool stopped;

    public IBusControl Bus { get; }
    public Deliveries Deliveries { get; } = new();
    public IServiceProvider Services => services;

    private Instance(ServiceProvider services)
    {
        this.services = services;
        Bus = services.GetRequiredService<IBusControl>();
        Bus.ConnectReceiveObserver(Deliveries);
    }

    /// <summary>Starts the bus as a host does (MassTransit's hosted service), with a consumer stop timeout:
    /// on stop, deliveries still running after it see their CancellationToken cancelled.</summary>
    public static async Task<Instance> StartAsync(Action<IServiceCollection> configure)
    {
        var collection = new ServiceCollection();
        collection.AddLogging();
        configure(collection);
        collection.Configure<MassTransitHostOptions>(o =>
        {
            o.WaitUntilStarted = true;
            o.StartTimeout = TimeSpan.FromSeconds(60);
            o.StopTimeout = TimeSpan.FromSeconds(30);
            o.ConsumerStopTimeout = TimeSpan.FromSeconds(2);
        });
        var instance = new Instance(collection.BuildServiceProvider());
        using var cts = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        foreach (var hosted in instance.services.GetServices<IHostedService>())
            await hosted.StartAsync(cts.Token);
        return instance;
    }

    public async Task SendAsync<T>(string queue, T message, Guid messageId) where T : class
    {
        var endpoint = await Bus.GetSendEndpoint(new Uri($"queue:{queue}"));
        await endpoint.Send(message, c => c.MessageId = messageId);
    }

    public async Task StopAsync()
    {
        if (stopped)
            return;
        stopped = true;
        using var cts = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        foreach (var hosted in services.GetServices<IHostedService>().Reverse())
            await hosted.StopAsync(cts.Token);
    }

    public async ValueTask DisposeAsync()
    {
        await StopAsync();
        await services.DisposeAsync();
    }
}
