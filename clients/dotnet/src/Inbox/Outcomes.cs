namespace Inbox;

/// <summary>What <c>inbox_begin_outcome</c> found when a two-phase claim was attempted.</summary>
public enum BeginOutcome
{
    /// <summary>A new message: this caller owns it; do the work with the token.</summary>
    Claimed,

    /// <summary>An earlier attempt was released or its lease ran out: do the work with the new token
    /// (the earlier attempt may have done some of it).</summary>
    TakenOver,

    /// <summary>Done before: acknowledge the message.</summary>
    Processed,

    /// <summary>Its attempts are used up: acknowledge the message, and alert.</summary>
    Failed,

    /// <summary>A live claim holds it: do not acknowledge; have it delivered again after
    /// <see cref="BeginResult.RetryAfter"/>.</summary>
    Busy,
}

/// <summary>The answer of <c>inbox_begin_outcome</c>.</summary>
/// <param name="Outcome">What the call found.</param>
/// <param name="Token">The fencing token this caller holds: set exactly when
/// <paramref name="Outcome"/> is <see cref="BeginOutcome.Claimed"/> or <see cref="BeginOutcome.TakenOver"/>.</param>
/// <param name="RetryAfter">When <see cref="BeginOutcome.Busy"/>: how long until the live claim's lease
/// runs out (on the database's clock).</param>
public readonly record struct BeginResult(BeginOutcome Outcome, long? Token, TimeSpan? RetryAfter)
{
    /// <summary>True when this caller holds the claim and must do the work.</summary>
    public bool MustWork => Outcome is BeginOutcome.Claimed or BeginOutcome.TakenOver;

    /// <summary>True when the message is finished (processed or failed for good): acknowledge it.</summary>
    public bool ShouldAck => Outcome is BeginOutcome.Processed or BeginOutcome.Failed;

    internal static BeginOutcome Parse(string outcome) => outcome switch
    {
        "claimed" => BeginOutcome.Claimed,
        "taken_over" => BeginOutcome.TakenOver,
        "processed" => BeginOutcome.Processed,
        "failed" => BeginOutcome.Failed,
        "busy" => BeginOutcome.Busy,
        _ => throw new InvalidOperationException($"inbox_begin_outcome answered an unknown outcome '{outcome}'"),
    };
}

/// <summary>A claim taken by <c>inbox_next</c> for a sweeper.</summary>
/// <param name="MessageId">The message's id.</param>
/// <param name="Token">The new fencing token.</param>
/// <param name="Attempts">How many times the message has been claimed, this claim included.</param>
/// <param name="Payload">The JSON payload the first begin stored, or null.</param>
public sealed record NextClaim(string MessageId, long Token, int Attempts, string? Payload);
