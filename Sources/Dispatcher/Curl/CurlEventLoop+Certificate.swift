import APNs
import Locking
import Synchronization

// A replaced client certificate (a renewal applied by a reload): from the loop's next pass on,
// every request goes out with the new one, on connections opened with it. Runs on the loop's
// thread only, like the rest of the loop.
extension CurlEventLoop {
    /// Any thread: the loop presents `identity` from its next pass on.
    func replaceCertificate(_ identity: ClientIdentity) {
        certificateInbox.withLock { $0 = identity }
        certificateWaiting.store(true, ordering: .releasing)
        epoll.wake()
    }

    /// Takes the certificate `replaceCertificate` handed in. The same certificate again changes
    /// nothing. Another one:
    ///
    /// - handles are given it before their next request (`CurlTransfer.use`, by generation);
    /// - transfers libcurl holds but has not begun to send go back to the front of the queue,
    ///   unsent and their attempt not counted: they would go out with the old certificate;
    /// - every established connection is retired as after ExpiredProviderToken (docs/dispatcher.md,
    ///   "Retirement"): no new stream on it, the streams it carries are answered, then its socket
    ///   is shut down; admissions wait for that, about one round trip, and the next request opens a
    ///   connection with the new certificate. libcurl would not put a request with the new
    ///   certificate on an old connection anyway (it compares the certificate blobs), but the old
    ///   ones would stay open, idle, counted against the loop's connections.
    func takeReplacedCertificate() {
        certificateWaiting.store(false, ordering: .releasing)
        guard let identity = certificateInbox.withLock({ $0.take() }), credential.identity != identity else { return }
        credential = .certificate(identity)
        credentialGeneration = credentialGeneration == Int32.max ? 0 : credentialGeneration + 1
        withdrawUnsent()
        for (socket, connection) in connectionOfSocket.sorted(by: { $0.value < $1.value }) {
            _ = policy.handle(.retireRequested(connection: connection, socket: socket))
        }
        sink.counters.connectionReplacements.add(connectionOfSocket.count, ordering: .relaxed)
        sink.metrics.certificateReplaced(connectionsRetired: connectionOfSocket.count)
        checkRetiredConnections()
        releaseSlots()
    }

    /// Takes the transfers libcurl holds and has not begun to send (no pre-request call yet)
    /// back into the queue's front.
    private func withdrawUnsent() {
        var withdrawn = 0
        for transfer in transfers.reversed() where transfer.sends == 0 {
            guard var pending = transfer.pending.take() else { continue }
            multi.remove(transfer.easy)
            transfer.responseBody.removeAll(keepingCapacity: true)
            freeTransfers.append(transfer.index)
            // Nothing of it went out on this attempt: it was none.
            pending.attempts -= 1
            backlog.pushFront(pending)
            withdrawn += 1
        }
        guard withdrawn > 0 else { return }
        inCurl -= withdrawn
        sink.metrics.inFlightChanged(by: -withdrawn)
    }
}
