internal import CCurl

/// Reading a readable socket through one of its connection's transfers (`SocketReadRoute`,
/// docs/dispatcher.md "Reading a socket through one transfer").
extension CurlEventLoop {
    /// The transfer that reads `fd` for its connection, if `readRoute` says so: one that has
    /// sent its request on the connection with that socket's local port. nil hands the event to
    /// libcurl, which runs every transfer on the socket.
    func reader(for fd: Int32, readable: Bool, writable: Bool, failed: Bool) -> UnsafeMutableRawPointer? {
        guard readRoute.throughOneTransfer(readable: readable, writable: writable, failed: failed, inFlight: inCurl) else { return nil }
        // A transfer knows the local port of its connection (`CurlTransfer.localPort`), not its
        // socket; the port of an established connection's socket is known (`connectionUsed`).
        guard let port = establishedSockets[fd] else { return nil }
        for transfer in transfers where transfer.localPort == port && transfer.sends > 0 && transfer.pending != nil {
            readThroughOneTransfer = true
            sink.counters.socketReadsThroughOneTransfer.add(1, ordering: .relaxed)
            return transfer.easy
        }
        return nil
    }
}
