/// The cause a completion batch's connect failures give their backoff. The transfers that
/// waited for a connection fail together in one batch, and back off once; what failed first is
/// not always what says most. A reset inside a TLS 1.2 handshake after the client's certificate
/// went out (`endedDuringHandshakeAfterClientCertificate`), or a connection that completed its
/// handshake and ended before answering (`endedAfterHandshake`, from a connection lost in the
/// same batch), is the fact pushd turns into the certificate hint: the cause is the first one
/// of the batch with the most specific fact, not the first one.
struct BatchFailureCause {
    /// Whether a connection could not be opened in the batch: only that backs off here (a lost
    /// connection backs off where it is found).
    private(set) var connectFailed = false
    private(set) var cause: ConnectionFailureCause?

    /// A transfer of the batch could not open its connection.
    mutating func noteConnectFailure(_ failure: ConnectionFailureCause) {
        connectFailed = true
        keepMostSpecific(failure)
    }

    /// A connection of the batch completed its handshake and ended without answering: informs
    /// the cause, backs nothing off.
    mutating func noteEndedAfterHandshake(_ failure: ConnectionFailureCause) {
        keepMostSpecific(failure)
    }

    /// The backoff's cause when a connection could not be opened in the batch, then empty for
    /// the next batch.
    mutating func take() -> ConnectionFailureCause? {
        defer { self = BatchFailureCause() }
        return connectFailed ? cause : nil
    }

    private mutating func keepMostSpecific(_ failure: ConnectionFailureCause) {
        if cause.map({ Self.specificity(failure) > Self.specificity($0) }) ?? true { cause = failure }
    }

    /// A reset inside the handshake after the certificate went out says most (the server took
    /// the certificate and refused it, or went down at that moment); a connection that ended
    /// after its handshake says less (a TLS 1.3 refusal looks so, and so does a server going
    /// down); a plain failure says nothing of the certificate.
    static func specificity(_ cause: ConnectionFailureCause) -> Int {
        cause.endedDuringHandshakeAfterClientCertificate ? 2 : cause.endedAfterHandshake ? 1 : 0
    }
}
