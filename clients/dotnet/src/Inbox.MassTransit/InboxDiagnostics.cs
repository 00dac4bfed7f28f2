using System.Diagnostics.Metrics;

namespace Inbox;

/// <summary>The filters' metrics, on the <c>Inbox.MassTransit</c> meter: <c>inbox.duplicates</c> (deliveries
/// acknowledged as duplicates), <c>inbox.busy</c> (two-phase deliveries held because a live claim holds the
/// message) and <c>inbox.stale</c> (two-phase completions refused: ownership was lost). Each carries the
/// consumer name as the tag <c>inbox.consumer</c>.</summary>
public static class InboxDiagnostics
{
    /// <summary>The meter's name.</summary>
    public const string MeterName = "Inbox.MassTransit";

    private static readonly Meter Meter = new(MeterName);
    private static readonly Counter<long> Duplicates = Meter.CreateCounter<long>("inbox.duplicates");
    private static readonly Counter<long> Busy = Meter.CreateCounter<long>("inbox.busy");
    private static readonly Counter<long> Stale = Meter.CreateCounter<long>("inbox.stale");

    internal static void OnDuplicate(string consumer) => Duplicates.Add(1, new KeyValuePair<string, object?>("inbox.consumer", consumer));

    internal static void OnBusy(string consumer) => Busy.Add(1, new KeyValuePair<string, object?>("inbox.consumer", consumer));

    internal static void OnStale(string consumer) => Stale.Add(1, new KeyValuePair<string, object?>("inbox.consumer", consumer));
}
