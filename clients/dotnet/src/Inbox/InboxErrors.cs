using Npgsql;

namespace Inbox;

/// <summary>What a consumer does with a message after an error (the README's Errors table).</summary>
public enum InboxAction
{
    /// <summary>Not an error this table classifies: let it propagate as usual.</summary>
    Unknown,

    /// <summary>Serialization failure or deadlock (40001, 40P01): roll back and run the transaction again.</summary>
    Retry,

    /// <summary>Lock timeout, statement timeout, cancel (55P03, 57014) or a broken connection: roll back
    /// and leave the message unacknowledged, for the broker to deliver again.</summary>
    Redeliver,

    /// <summary>A NULL, empty, too long or malformed argument, or a payload over 1 MB: a poison message,
    /// dead-letter it and do not retry.</summary>
    DeadLetter,

    /// <summary>A read-only transaction (25006, a standby after a failover): reconnect to the primary and
    /// leave the message unacknowledged.</summary>
    Reconnect,

    /// <summary>A deployment error (missing privilege, a pooler that breaks prepared statements, a dropped
    /// or damaged extension): stop consuming and alert.</summary>
    Stop,
}

/// <summary>Maps PostgreSQL errors met by a consumer to <see cref="InboxAction"/>s.</summary>
/// <remarks>The library never wraps Npgsql's exceptions (EF Core's retrying execution strategy must see
/// them as they are); classify any exception, from a claim or from the business change, here.</remarks>
public static class InboxErrors
{
    /// <summary>The action for a SQLSTATE, as the README's Errors table gives it.</summary>
    /// <param name="sqlState">A five-character SQLSTATE.</param>
    public static InboxAction ActionFor(string? sqlState) => sqlState switch
    {
        "22004" or "22023" or "22001" or "2202E" or "54000" => InboxAction.DeadLetter,
        "40001" or "40P01" => InboxAction.Retry,
        "55P03" or "57014" => InboxAction.Redeliver,
        "25006" => InboxAction.Reconnect,
        "42501" or "42P05" or "26000" or "2BP01" or "55000" or "42883" or "3F000" => InboxAction.Stop,
        _ => InboxAction.Unknown,
    };

    /// <summary>The action for an exception: the first <see cref="PostgresException"/> among it and its inner
    /// exceptions decides; a transient <see cref="NpgsqlException"/> without a SQLSTATE (a broken connection)
    /// is <see cref="InboxAction.Redeliver"/>.</summary>
    /// <param name="exception">What a claim, a two-phase call or the business change threw.</param>
    public static InboxAction ActionFor(Exception exception)
    {
        ArgumentNullException.ThrowIfNull(exception);
        for (Exception? e = exception; e is not null; e = e.InnerException)
        {
            if (e is PostgresException pg)
                return ActionFor(pg.SqlState);
            if (e is NpgsqlException { IsTransient: true })
                return InboxAction.Redeliver;
        }
        return InboxAction.Unknown;
    }
}

/// <summary>A one-phase claim was attempted outside a transaction. Such a claim commits on its own: if the
/// business change then fails, the redelivery finds the marker and is skipped, and the message is lost.</summary>
public sealed class InboxTransactionRequiredException : InvalidOperationException
{
    /// <summary>Creates the exception with the standard message.</summary>
    public InboxTransactionRequiredException()
        : base("inbox: a one-phase claim must run inside the business transaction; begin a transaction first " +
               "(a claim committed on its own loses the message when the business change fails)")
    {
    }

    /// <summary>Creates the exception with a message.</summary>
    /// <param name="message">The message.</param>
    public InboxTransactionRequiredException(string message) : base(message)
    {
    }

    /// <summary>Creates the exception with a message and an inner exception.</summary>
    /// <param name="message">The message.</param>
    /// <param name="innerException">The cause.</param>
    public InboxTransactionRequiredException(string message, Exception innerException) : base(message, innerException)
    {
    }
}

/// <summary>A two-phase call was attempted inside an open transaction. A begin that has not committed is
/// invisible to every other instance and rolls back with a crash: the side effect would then happen with no
/// claim behind it.</summary>
public sealed class InboxTransactionNotAllowedException : InvalidOperationException
{
    /// <summary>Creates the exception with the standard message.</summary>
    public InboxTransactionNotAllowedException()
        : base("inbox: two-phase calls run each in its own short transaction; commit or dispose the open transaction first")
    {
    }

    /// <summary>Creates the exception with a message.</summary>
    /// <param name="message">The message.</param>
    public InboxTransactionNotAllowedException(string message) : base(message)
    {
    }

    /// <summary>Creates the exception with a message and an inner exception.</summary>
    /// <param name="message">The message.</param>
    /// <param name="innerException">The cause.</param>
    public InboxTransactionNotAllowedException(string message, Exception innerException) : base(message, innerException)
    {
    }
}
