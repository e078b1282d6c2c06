/// What the sender must do after APNs answered (or failed to answer) a request.
public enum ResponseAction: Sendable, Hashable {
    /// APNs accepted the notification.
    case delivered
    /// The token is dead: stop sending to it and do not retry. `timestamp` (ms since the epoch,
    /// from a 410) is when APNs learned it; a token registered again after that is still alive.
    /// nil means the token is invalid as of now (BadDeviceToken, DeviceTokenNotForTopic).
    case pruneToken(timestamp: Int64?)
    /// Try again after a backoff (`RetryPolicy` decides when and whether).
    case retry
    /// The provider token is too old: mint a new one, then retry.
    case refreshProviderTokenThenRetry
    /// The connection is no longer usable: open another one, then retry after a backoff.
    case reconnectThenRetry
    /// Retrying cannot help; record the job as dead.
    case deadLetter(why: String)
    /// The app's configuration does not allow this kind of request (a topic its credentials
    /// may not use, broadcast push not enabled, no room for another channel): nothing of that
    /// `scope` can succeed until the operator fixes it. Hold sending for the scope, keep the
    /// notification and everything behind it, and say `why` and what to fix.
    case holdScope(ConfigurationScope, reason: APNsReason, why: String)
    /// The app's credentials or environment are wrong: stop sending for that app, alert, and
    /// keep its jobs for after the fix.
    case configurationError(reason: APNsReason)

    /// Whether the job should be attempted again.
    public var retries: Bool {
        switch self {
        case .retry, .refreshProviderTokenThenRetry, .reconnectThenRetry: return true
        case .delivered, .pruneToken, .deadLetter, .holdScope, .configurationError: return false
        }
    }
}
