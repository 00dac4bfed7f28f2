using MassTransit;
using Microsoft.EntityFrameworkCore;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Inbox;

/// <summary>The DbContext type the inbox filters claim on, registered by
/// <see cref="InboxMassTransitExtensions.AddInbox{TDbContext}"/>.</summary>
internal sealed class InboxDbContextType(Type type)
{
    public Type Type { get; } = type;
}

/// <summary>The claim a two-phase consumer holds while it runs: read it with
/// <c>context.GetPayload&lt;InboxClaim&gt;()</c> and pass <see cref="Token"/> downstream as the fence,
/// <see cref="MessageId"/> as the idempotency key.</summary>
/// <param name="MessageId">The message's id (the MassTransit MessageId, canonical form).</param>
/// <param name="Consumer">The inbox consumer name.</param>
/// <param name="Token">The fencing token of this claim.</param>
/// <param name="Outcome"><see cref="BeginOutcome.Claimed"/>, or <see cref="BeginOutcome.TakenOver"/> when an
/// earlier attempt may have done part of the work.</param>
public sealed record InboxClaim(string MessageId, string Consumer, long Token, BeginOutcome Outcome);

/// <summary>Registration and configuration of the inbox filters.</summary>
public static class InboxMassTransitExtensions
{
    /// <summary>Names the scoped <typeparamref name="TDbContext"/> the inbox filters claim on: the same
    /// instance the consumers get, so their <c>SaveChangesAsync</c> joins the claim's transaction.</summary>
    /// <typeparam name="TDbContext">The application's context, registered with <c>AddDbContext</c>.</typeparam>
    /// <param name="services">The service collection.</param>
    /// <returns>The service collection.</returns>
    public static IServiceCollection AddInbox<TDbContext>(this IServiceCollection services)
        where TDbContext : DbContext
    {
        ArgumentNullException.ThrowIfNull(services);
        services.AddSingleton(new InboxDbContextType(typeof(TDbContext)));
        return services;
    }

    /// <summary>One-phase inbox for this consumer: each delivery runs in one transaction that claims the
    /// message (<c>inbox_claim</c>) and commits with the consumer's changes; a duplicate is acknowledged
    /// without calling the consumer. An exception rolls back the claim with the changes and propagates,
    /// for the retry and redelivery policies configured outside this filter.</summary>
    /// <typeparam name="TConsumer">The consumer.</typeparam>
    /// <param name="configurator">The consumer's configurator.</param>
    /// <param name="consumer">The inbox consumer name (one marker per message and name).</param>
    public static void UseInbox<TConsumer>(this IConsumerConfigurator<TConsumer> configurator, string consumer)
        where TConsumer : class
    {
        ArgumentNullException.ThrowIfNull(configurator);
        ArgumentException.ThrowIfNullOrEmpty(consumer);
        configurator.UseFilter(new InboxFilter<TConsumer>(consumer));
    }

    /// <summary>Two-phase inbox for a consumer whose side effect is outside the database: claim and commit
    /// (<c>inbox_begin_outcome</c>), run the consumer, then <c>inbox_complete</c>. Processed and failed
    /// messages are acknowledged without calling the consumer. A busy message (a live claim elsewhere) is
    /// never acknowledged: the delivery is held and its claim tried again after <c>retry_after</c> (the
    /// holder has then completed, or died and the claim is taken over); if this instance stops meanwhile,
    /// the broker delivers it again. A consumer exception records <c>inbox_fail</c> and propagates.</summary>
    /// <typeparam name="TConsumer">The consumer.</typeparam>
    /// <param name="configurator">The consumer's configurator.</param>
    /// <param name="consumer">The inbox consumer name.</param>
    /// <param name="lease">The claim's lease; null: the consumer's configured lease, else <c>inbox.lease</c>.
    /// Keep it shorter than RabbitMQ's <c>consumer_timeout</c>, since a busy delivery is held that long.</param>
    public static void UseInboxTwoPhase<TConsumer>(this IConsumerConfigurator<TConsumer> configurator,
        string consumer, TimeSpan? lease = null)
        where TConsumer : class
    {
        ArgumentNullException.ThrowIfNull(configurator);
        ArgumentException.ThrowIfNullOrEmpty(consumer);
        configurator.UseFilter(new InboxTwoPhaseFilter<TConsumer>(consumer, lease));
    }

    internal static DbContext ResolveDbContext(ConsumeContext context)
    {
        var services = context.GetPayload<IServiceProvider>();
        var type = services.GetService<InboxDbContextType>() ?? throw new InvalidOperationException(
            "inbox: register the DbContext the inbox claims on with services.AddInbox<TDbContext>()");
        return (DbContext)services.GetRequiredService(type.Type);
    }

    internal static ILogger Logger(ConsumeContext context, string category)
        => context.GetPayload<IServiceProvider>().GetService<ILoggerFactory>()?.CreateLogger(category)
           ?? NullLogger.Instance;

    internal static Guid RequireMessageId(ConsumeContext context)
        => context.MessageId ?? throw new InvalidOperationException(
            "inbox: the message has no MessageId; the producer must set one, the same on every send of the message");
}

/// <summary>The one-phase filter; see <see cref="InboxMassTransitExtensions.UseInbox{TConsumer}"/>.</summary>
/// <typeparam name="TConsumer">The consumer.</typeparam>
/// <param name="consumer">The inbox consumer name.</param>
public sealed class InboxFilter<TConsumer>(string consumer) : IFilter<ConsumerConsumeContext<TConsumer>>
    where TConsumer : class
{
    /// <inheritdoc />
    public async Task Send(ConsumerConsumeContext<TConsumer> context, IPipe<ConsumerConsumeContext<TConsumer>> next)
    {
        ArgumentNullException.ThrowIfNull(context);
        ArgumentNullException.ThrowIfNull(next);
        var messageId = InboxMassTransitExtensions.RequireMessageId(context);
        var db = InboxMassTransitExtensions.ResolveDbContext(context);
        bool processed = await db.ProcessOnceAsync(messageId, consumer,
            _ => next.Send(context), context.CancellationToken).ConfigureAwait(false);
        if (!processed)
        {
            var log = InboxMassTransitExtensions.Logger(context, "Inbox");
            Log.Duplicate(log, messageId, consumer);
            InboxDiagnostics.OnDuplicate(consumer);
        }
    }

    /// <inheritdoc />
    public void Probe(ProbeContext context)
    {
        ArgumentNullException.ThrowIfNull(context);
        var scope = context.CreateFilterScope("inbox");
        scope.Add("consumer", consumer);
    }
}

/// <summary>The two-phase filter; see <see cref="InboxMassTransitExtensions.UseInboxTwoPhase{TConsumer}"/>.</summary>
/// <typeparam name="TConsumer">The consumer.</typeparam>
/// <param name="consumer">The inbox consumer name.</param>
/// <param name="lease">The claim's lease, or null.</param>
public sealed class InboxTwoPhaseFilter<TConsumer>(string consumer, TimeSpan? lease) : IFilter<ConsumerConsumeContext<TConsumer>>
    where TConsumer : class
{
    /// <inheritdoc />
    public async Task Send(ConsumerConsumeContext<TConsumer> context, IPipe<ConsumerConsumeContext<TConsumer>> next)
    {
        ArgumentNullException.ThrowIfNull(context);
        ArgumentNullException.ThrowIfNull(next);
        string messageId = InboxMassTransitExtensions.RequireMessageId(context).ToString();
        var db = InboxMassTransitExtensions.ResolveDbContext(context).Database;
        var log = InboxMassTransitExtensions.Logger(context, "Inbox");
        var ct = context.CancellationToken;
        while (true)
        {
            var begin = await db.BeginAsync(messageId, consumer, lease, null, ct).ConfigureAwait(false);
            switch (begin.Outcome)
            {
                case BeginOutcome.Processed:
                    return;                                             // ack: done before
                case BeginOutcome.Failed:
                    Log.FailedForGood(log, messageId, consumer);
                    return;
                case BeginOutcome.Busy:
                    // Never ack: the holder may die.  Hold the delivery until the lease can have run out.
                    var wait = begin.RetryAfter ?? TimeSpan.FromSeconds(1);
                    Log.Busy(log, messageId, consumer, wait);
                    InboxDiagnostics.OnBusy(consumer);
                    await Task.Delay(wait < TimeSpan.FromMilliseconds(10) ? TimeSpan.FromMilliseconds(10) : wait, ct).ConfigureAwait(false);
                    continue;
            }

            long token = begin.Token!.Value;
            var claim = new InboxClaim(messageId, consumer, token, begin.Outcome);
            context.AddOrUpdatePayload(() => claim, _ => claim);
            try
            {
                await next.Send(context).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                // Not cancelled with the delivery: the claim is released for the next one.
                await db.FailAsync(messageId, consumer, token, e.Message, CancellationToken.None).ConfigureAwait(false);
                throw;
            }
            if (await db.CompleteAsync(messageId, consumer, token, CancellationToken.None).ConfigureAwait(false))
                return;                                                 // ack
            // Ownership was lost while the consumer ran: ask again what is left to do.
            Log.Stale(log, messageId, consumer, token);
            InboxDiagnostics.OnStale(consumer);
        }
    }

    /// <inheritdoc />
    public void Probe(ProbeContext context)
    {
        ArgumentNullException.ThrowIfNull(context);
        var scope = context.CreateFilterScope("inboxTwoPhase");
        scope.Add("consumer", consumer);
    }
}
