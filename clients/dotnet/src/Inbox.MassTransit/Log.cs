using Microsoft.Extensions.Logging;

namespace Inbox;

internal static partial class Log
{
    [LoggerMessage(EventId = 1, Level = LogLevel.Debug, Message = "inbox: {MessageId} for {Consumer} is a duplicate, acknowledged")]
    public static partial void Duplicate(ILogger logger, Guid messageId, string consumer);

    [LoggerMessage(EventId = 2, Level = LogLevel.Warning, Message = "inbox: {MessageId} for {Consumer} has failed for good; acknowledged")]
    public static partial void FailedForGood(ILogger logger, string messageId, string consumer);

    [LoggerMessage(EventId = 3, Level = LogLevel.Debug, Message = "inbox: {MessageId} for {Consumer} is busy; claimed again in {RetryAfter}")]
    public static partial void Busy(ILogger logger, string messageId, string consumer, TimeSpan retryAfter);

    [LoggerMessage(EventId = 4, Level = LogLevel.Warning, Message = "inbox: {MessageId} for {Consumer}: token {Token} is stale, the claim was taken over")]
    public static partial void Stale(ILogger logger, string messageId, string consumer, long token);
}
