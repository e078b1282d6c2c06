import QueueStore

extension PGError {
    /// The session ended before the statement's answer came: an autocommit statement (a
    /// claim, a lease) may have gone through without its caller learning what it took.
    func leftStatementInDoubt(on connection: PGConnection?) -> Bool {
        code.isConnectionLoss || code == .connectionClosed || connection?.isOpen != true
    }
}
