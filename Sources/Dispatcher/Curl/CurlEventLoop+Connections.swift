import Glibc
import Polling

// Connection bookkeeping of the loop: which connections requests were moved off (ended in
// order or refused streams), retirement at the server's request, connection-limit changes
// and libcurl's socket callbacks. Runs on the loop's thread only, like the rest of the loop.
extension CurlEventLoop {
    /// libcurl sent the request more than once: count the resends. When it moved the request
    /// off the connection it first went on, and no request on that connection failed, the
    /// server ended the connection in order (a GOAWAY, or streams it refused: libcurl reports
    /// no more than that); that is reported once per connection. A broken connection is
    /// reported as `reset` by the requests that failed on it.
    func noteResends(_ transfer: CurlTransfer) {
        guard transfer.sends > 1 else { return }
        let resent = transfer.sends - 1
        sink.counters.resentByTransport.add(resent, ordering: .relaxed)
        let moved = TransportResend(reason: .movedByLibcurl, detail: "the connection the request went on refused its stream or ended before answering it; libcurl sent it again on another",
                                    host: configuration.host)
        for _ in 0..<resent { sink.metrics.requestResent(moved) }
        let first = transfer.firstConnectionID
        if first >= 0, first != transfer.connectionID, !endedConnections.contains(first), !movedFrom.contains(where: { $0.connection == first }) {
            movedFrom.append((first, monotonicNanoseconds(), policy.churn.refusedBeforeAnswering(first)))
        }
    }

    /// A connection requests were moved from, and on which none failed within
    /// `Self.endJudgedAfter`, stopped taking streams in order, reported once: as streams the
    /// server refused when it had answered at most one (its SETTINGS allowed fewer than libcurl
    /// sent before reading them, and libcurl closed it), else as a GOAWAY.
    func judgeMovedConnections(now: UInt64) {
        guard let oldest = movedFrom.first, now >= oldest.at + Self.endJudgedAfter else { return }
        movedFrom.removeAll { moved in
            guard now >= moved.at + Self.endJudgedAfter else { return false }
            if !brokenConnections.contains(moved.connection), endedConnections.insert(moved.connection) {
                reportFailure(moved.refused ? .refusedStream : .goaway)
            }
            return true
        }
    }

    static let endJudgedAfter: UInt64 = 250_000_000

    /// The server asked for a new connection, or the connection failed (`failedAt`): the one
    /// the transfer went on takes no new stream, and after a failure its replacement waits.
    func retire(_ transfer: CurlTransfer, failedAt: UInt64?, cause: String) {
        sink.counters.connectionReplacements.add(1, ordering: .relaxed)
        sink.metrics.connectionReplacementRequested()
        let socket = openSockets.first { SocketAddress.localPort(of: $0) == transfer.localPort }
        guard let now = failedAt else {
            _ = policy.handle(.retireRequested(connection: transfer.connectionID, socket: socket))
            return
        }
        backOff(policy.handle(.connectionFailed(connection: transfer.connectionID, socket: socket, now: now,
                                                unitRandom: Double.random(in: 0..<1, using: &random))),
                cause: ConnectionFailureCause(cause))
    }

    // MARK: - Connections that end without answering

    /// From libcurl's open-socket callback: whether a connection may be opened now for
    /// `transfer`. One that already went on a connection in this attempt is being sent again
    /// by libcurl itself (that connection was reset or closed, or refused its stream), so that
    /// connection ended without answering it. During a backoff no connection is opened, by the
    /// loop's admissions or by libcurl: the transfer fails, held back, and its request waits in
    /// the loop's queue like every other. So does libcurl's resend after a connection churned
    /// (`ConnectionPolicy.resendsHeldAbove`).
    func mayOpenConnection(for transfer: CurlTransfer) -> Bool {
        let now = monotonicNanoseconds()
        let resend = transfer.sends > 0
        if resend { resentOffConnection(transfer.connectionID, localPort: transfer.localPort, now: now, reporterCounted: true) }
        guard policy.mayOpenConnection(now: now, resend: resend) else {
            transfer.heldBack = true
            return false
        }
        return true
    }

    /// From libcurl's header callback: an answer's status line arrived on `connection`.
    func answerArrived(on connection: Int64) {
        policy.noteAnswer(on: connection, now: monotonicNanoseconds())
    }

    /// From libcurl's callbacks: it sends a request again, on another connection, off
    /// `connection` (at `localPort`), which ended without answering it. What the policy decides
    /// is carried out once libcurl has returned (`takeDeferredBackoffs`): handing requests back
    /// removes transfers, which libcurl forbids inside its callbacks. A request went on that
    /// connection, so its TLS handshake was done.
    /// `reporterCounted`: the transfer reporting it is still on that connection (the open-socket
    /// callback); from the pre-request callback it is on its new one already.
    func resentOffConnection(_ connection: Int64, localPort: Int32, now: UInt64 = monotonicNanoseconds(),
                             reporterCounted: Bool = false) {
        connectionLost(connection, localPort: localPort, now: now, deferred: true, unansweredBesides: reporterCounted ? 0 : 1,
                       detail: " (libcurl sent its requests again)")
    }

    /// Requests on `connection` (at `localPort`) were left unanswered: it ended, or reset their
    /// streams. If it never answered, or churned, it failed (`ConnectionPolicy.Event.connectionLost`):
    /// the backoff is carried out now, or after libcurl returns when `deferred`. `detail` (what
    /// libcurl said) ends the cause; `unansweredBesides`: the reporting request, when it is no
    /// longer among the connection's transfers.
    func connectionLost(_ connection: Int64, localPort: Int32, now: UInt64, deferred: Bool, unansweredBesides: Int,
                        detail: @autoclosure () -> String) {
        // Most losses are of connections that answered (a server's GOAWAY, a dropped path): no
        // failure, judged once per connection.
        guard policy.lossNeedsJudging(connection) else { return }
        let socket = localPort > 0 ? openSockets.first { SocketAddress.localPort(of: $0) == localPort } : nil
        let action = policy.handle(.connectionLost(connection: connection, socket: socket, now: now,
                                                   unitRandom: Double.random(in: 0..<1, using: &random)))
        guard case .backOff = action else { return }
        let cause = lossCause(connection, now: now, unanswered: unansweredBesides + unanswered(on: connection), detail: detail())
        if deferred {
            deferredBackoffs.append((action, cause))
        } else {
            backOff(action, cause: cause)
        }
    }

    /// How long after its last answer a connection closed in order is still judged by its
    /// answers (`ConnectionChurn.endedInOrder`): 3 s, for libcurl's shutdown of up to 2 s, but
    /// below `idleCloseSeconds`, so that a connection libcurl let go idle is never judged so.
    var closeAfterLastAnswerNanoseconds: UInt64 {
        let idle = configuration.idleCloseSeconds > 0 ? UInt64(configuration.idleCloseSeconds) * 1_000_000_000 : UInt64.max
        return min(ConnectionChurn.closeAfterLastAnswerNanoseconds, idle)
    }

    /// Connections libcurl closed since the last look, with nothing of them failed (a loss is
    /// judged when it is reported): the server ended them in order (a GOAWAY) or libcurl let
    /// them go. One that churned (`ConnectionChurn.endedInOrder`: a few answers, within two
    /// seconds, and closed soon after) was ended by the server, since the loop closes only
    /// connections it retired (those are not judged) and libcurl idle ones: a server that
    /// sends a GOAWAY after every answer or two costs a TLS handshake a request, which the loop
    /// would otherwise pay hundreds of times a second whenever it sends one request at a time.
    /// Judged as a loss with nothing unanswered, at its last answer, once libcurl has returned
    /// and the answers that came with the close were read.
    private func judgeClosedConnections() {
        guard !closedConnections.isEmpty else { return }
        let closed = closedConnections
        closedConnections.removeAll(keepingCapacity: true)
        let now = monotonicNanoseconds()
        for (connection, closedAt) in closed {
            guard policy.lossNeedsJudging(connection),
                  let endedAt = policy.churn.endedInOrder(connection, closedAt: closedAt, within: closeAfterLastAnswerNanoseconds) else { continue }
            // Its socket is closed, and its descriptor may be reused: none is named. Judged at its
            // last answer; a backoff runs from now.
            let action = policy.handle(.connectionLost(connection: connection, socket: nil, now: now,
                                                       unitRandom: Double.random(in: 0..<1, using: &random), endedAt: endedAt))
            // Retired as failed, it is closed already: nothing of it is left to drain, and the
            // loop must not hold admissions for it (no completion may come to look again).
            _ = policy.handle(.drained(connection: connection, closedBefore: true))
            guard case .backOff = action else { continue }
            deferredBackoffs.append((action, lossCause(connection, now: endedAt, unanswered: 0,
                                                       detail: " (it ended in order: a TLS handshake for every few requests)")))
        }
    }

    /// What the operator reads of a failed lost connection: that it answered nothing, or how
    /// little it answered before it was lost, and with how much unanswered.
    private func lossCause(_ connection: Int64, now: UInt64, unanswered: Int, detail: String) -> ConnectionFailureCause {
        guard let answered = policy.churn.answers(on: connection), answered.count > 0 else {
            // A request went on it, so its TLS handshake was done.
            return ConnectionFailureCause("the connection ended before answering anything\(detail)", endedAfterHandshake: true)
        }
        let answers = answered.count
        let lived = (now &- min(now, answered.firstAt)) / 1_000_000
        let left = unanswered > 0 ? " with \(unanswered) unanswered" : ""
        return ConnectionFailureCause("the connection answered \(answers) request\(answers == 1 ? "" : "s") and then was lost \(lived) ms after its first answer\(left), again and again (a server or middlebox ending each new connection after a few answers)\(detail)")
    }

    /// Requests on `connection` that libcurl holds unanswered.
    private func unanswered(on connection: Int64) -> Int {
        transfers.reduce(0) { $0 + ($1.pending != nil && $1.connectionID == connection && $1.status == 0 ? 1 : 0) }
    }

    /// Carries out the backoffs decided inside libcurl's callbacks.
    func takeDeferredBackoffs() {
        judgeClosedConnections()
        guard !deferredBackoffs.isEmpty else { return }
        let backoffs = deferredBackoffs
        deferredBackoffs.removeAll(keepingCapacity: true)
        for (action, cause) in backoffs { backOff(action, cause: cause) }
        releaseSlots()
    }

    /// A transfer libcurl could not send again because the loop refused it a connection during
    /// a backoff: its request waits in the queue for the backoff to end, its attempt counted
    /// if it went on the wire; or, out of attempts or time, it is answered now.
    func holdBack(_ pending: PendingRequest, _ transfer: CurlTransfer, now: UInt64) {
        var pending = pending
        transfer.heldBack = false
        transfer.responseBody.removeAll(keepingCapacity: true)
        // Nothing of it went out on this attempt: it was none.
        if transfer.sends == 0 { pending.attempts -= 1 }
        guard mayStart(pending, now: now) else {
            answerPastDeadline(pending)
            return
        }
        if pending.wentOnWire {
            lostThisBatch = true
            guard pending.attempts < configuration.maxAttempts else {
                var error = TransportError(code: CurlResultCode.receiveError.rawValue,
                                           message: "the connection ended without answering, and no new one is opened during the reconnect backoff")
                // It went on the wire, so that connection's handshake was done.
                error.endedAfterHandshake = transfer.connectionID >= 0 && !policy.hasAnswered(transfer.connectionID)
                deliver(pending, outcome: .transportFailure(error))
                return
            }
            sink.counters.retried.add(1, ordering: .relaxed)
            // An attempt that went on no connection was none (above): its request was counted
            // as resent when the attempt that did go on one ended.
            if transfer.sends > 0 {
                sink.metrics.requestResent(TransportResend(reason: .connectionLost,
                                                           detail: "the connection ended without answering, and libcurl could not send the request again during the reconnect backoff",
                                                           host: configuration.host))
            }
        }
        backlog.pushFront(pending)
    }

    /// Carries out a backoff the policy decided: announced once per run, and from the third
    /// failure in a row what waits unsent goes back to the caller.
    func backOff(_ action: ConnectionPolicy.Action, cause: ConnectionFailureCause) {
        guard case .backOff(let delay, let failures, let startsRun, let handsBack) = action else { return }
        sink.counters.reconnectBackoffs.add(1, ordering: .relaxed)
        if startsRun { sink.metrics.reconnectBackoffStarted(cause, delayMilliseconds: delay) }
        if handsBack {
            var notSent = NotSent(consecutiveFailures: failures, lastFailure: cause.text)
            notSent.lastFailureEndedAfterHandshake = cause.endedAfterHandshake
            notSent.lastFailureEndedDuringHandshakeAfterClientCertificate = cause.endedDuringHandshakeAfterClientCertificate
            handBackWaiting(notSent)
        }
    }

    /// A retired connection with no transfer left on it (and none that may still join it:
    /// those libcurl has not sent yet) is closed, so libcurl opens a new one.
    func checkRetiredConnections() {
        for connection in policy.retiring.keys {
            let busy = transfers.contains { $0.pending != nil && ($0.sends == 0 || $0.connectionID == connection) }
            if busy { continue }
            switch policy.handle(.drained(connection: connection)) {
            case .closeRetired(let socket):
                // libcurl offers no call to stop reusing a multiplexed connection (docs/dispatcher.md);
                // a socket shut down while idle is found dead by its check before reuse.
                _ = shutdown(socket, Int32(SHUT_RDWR))
            case .freshConnect:
                nextTransferFresh = true
            case .none, .holdAdmissions, .backOff, .backoffEnded, .setConnectionLimit, .undoGrowth, .growthKept,
                 .growthStarted, .growthAbandoned:
                break
            }
        }
    }

    /// Carries out a connection-limit change; true when there was one. A trial's start and end
    /// are reported whatever libcurl says of the limit, so that every start has its one verdict.
    @discardableResult
    func apply(_ action: ConnectionPolicy.Action) -> Bool {
        let connections: Int
        switch action {
        case .setConnectionLimit(let limit): connections = limit
        case .growthStarted(let limit):
            connections = limit
            reportStart()
        case .undoGrowth(let limit):
            connections = limit
            sink.counters.connectionGrowthsUndone.add(1, ordering: .relaxed)
            reportVerdict()
        case .growthAbandoned(let limit):
            connections = limit
            reportVerdict()
        case .growthKept:
            reportVerdict()
            return false
        case .none, .holdAdmissions, .closeRetired, .freshConnect, .backOff, .backoffEnded: return false
        }
        guard connections != connectionLimit else { return false }
        do {
            try multi.setConnectionLimit(connections)
        } catch {
            // libcurl accepted this option at start-up; should it refuse now, the loop keeps the
            // connections it has, which is what it would do without growth.
            return false
        }
        sink.metrics.connectionLimitChanged(to: connections)
        if connections > connectionLimit {
            sink.counters.connectionsGrown.add(1, ordering: .relaxed)
            connectionsExpected += 1
        }
        connectionLimit = connections
        return true
    }

    /// `wait` (milliseconds, -1: none) shortened so that the loop wakes when a trial whose work
    /// ran out is to end: an idle loop would otherwise sleep with the trial open until work came.
    func wakeForGrowthTrial(_ wait: Int64, now: UInt64) -> Int64 {
        guard let due = policy.wakeDeadline() else { return wait }
        let trial = Int64((due - min(now, due) + 999_999) / 1_000_000)
        return wait < 0 ? trial : min(wait, trial)
    }

    private func reportStart() {
        guard let start = policy.lastStart else { return }
        sink.counters.connectionGrowthsStarted.add(1, ordering: .relaxed)
        sink.metrics.connectionGrowthStarted(ConnectionGrowthStart(
            connectionsBefore: start.connectionsBefore, connections: start.connections, requestsWaiting: backlog.count,
            waitedMilliseconds: Int(start.waitedNanoseconds / 1_000_000), ratePerSecondBefore: start.rateBefore,
            streamsOnTrial: start.streamsOnTrial))
    }

    private func reportVerdict() {
        guard let verdict = policy.lastVerdict else { return }
        if verdict.abandoned != nil { sink.counters.connectionGrowthsAbandoned.add(1, ordering: .relaxed) }
        sink.metrics.connectionGrowthJudged(ConnectionGrowthVerdict(
            kept: verdict.kept, abandoned: verdict.abandoned, connections: verdict.connections, ratePerSecondBefore: verdict.rateBefore,
            ratePerSecondAfter: verdict.rateAfter, ratePerSecondRequired: verdict.rateRequired,
            growthHeldOffMilliseconds: Int(verdict.holdOffNanoseconds / 1_000_000)))
    }

    func reportFailure(_ reason: ConnectionFailureReason) {
        sink.counters.countFailure(reason)
        sink.metrics.connectionFailed(reason)
    }

    // MARK: - Sockets, from libcurl's open/close callbacks on this loop's thread

    // A socket is not yet a connection: libcurl opens one for every attempt, refused connects
    // and failed TLS handshakes included (those count as `connect` and `tls` failures). The
    // metrics hook hears of a connection once a request goes on it (`connectionUsed`), so an
    // outage's refused attempts do not read as reconnects.

    func socketOpened(_ fd: Int32) {
        openSockets.insert(fd)
        _ = policy.handle(.connectionOpened)
        sink.counters.connectionsOpened.add(1, ordering: .relaxed)
        sink.counters.connectionsChanged(by: 1)
    }

    /// From the pre-request callback: a request goes on the connection at `localPort`. The
    /// first one on it means it was established; the socket is found by its port then (once
    /// per connection), so that its close is matched without asking the closed socket.
    func connectionUsed(localPort: Int32, connection: Int64) {
        guard localPort > 0, !establishedPorts.contains(localPort),
              let fd = openSockets.first(where: { establishedSockets[$0] == nil && SocketAddress.localPort(of: $0) == localPort })
        else { return }
        establishedPorts.insert(localPort)
        establishedSockets[fd] = localPort
        newestConnectionID = max(newestConnectionID, connection)
        if connection >= 0 { connectionOfSocket[fd] = connection }
        sink.metrics.connectionOpened(reconnect: connectionsEverEstablished >= connectionsExpected)
        connectionsEverEstablished += 1
    }

    func socketClosed(_ fd: Int32) {
        // Judged once libcurl has returned and the loop has read the answers that came with the
        // close (one may retire the connection, or fail it with libcurl's word).
        if !epoll.isStopping, let connection = connectionOfSocket[fd] { closedConnections.append((connection, monotonicNanoseconds())) }
        openSockets.remove(fd)
        connectionOfSocket.removeValue(forKey: fd)
        if let port = establishedSockets.removeValue(forKey: fd) {
            establishedPorts.remove(port)
            sink.metrics.connectionClosed()
        }
        multi.socketClosing(fd)
        apply(policy.handle(.connectionClosed(socket: fd)))
        sink.counters.connectionsClosed.add(1, ordering: .relaxed)
        sink.counters.connectionsChanged(by: -1)
    }
}
