internal import CCurl
import APNs
import Glibc
import Polling

// Results out of libcurl: the loop reads what finished after every socket event and timer,
// applies `TransferDisposition` and `ConnectionPolicy` to each, retries or reports it, and
// returns the window slots of what it reported. Runs on the loop's thread only.
extension CurlEventLoop {
    /// Returns how many transfers finished.
    @discardableResult
    func readCompletions() -> Int {
        var finished = 0
        var answered = 0
        defer { answeredInLastBatch = answered }
        let timed = coalescing.enabled || inFlightSampler != nil
        let now = monotonicNanoseconds()
        multi.forEachFinished { easy, code in
            var privateData: UnsafeMutableRawPointer?
            _ = pushd_curl_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &privateData)
            multi.remove(easy)
            // Every handle this loop adds is one of its transfers; anything else is not ours to report.
            guard let index = CurlTransfer.poolIndex(privateData: privateData, count: transfers.count) else { return }
            // Taken out of libcurl earlier in this batch (`handBackWaiting`): already reported.
            guard transfers[index].pending != nil else { return }
            var status = 0
            _ = pushd_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            inCurl -= 1
            finished += 1
            if status != 0 { answered += 1 }
            if timed, status != 0 {
                let roundTrip = now &- transfers[index].enteredCurlAt
                if coalescing.enabled { coalescing.answered(after: roundTrip) }
                inFlightSampler?.answered(after: roundTrip)
            }
            finish(transfers[index], code: code, status: status, now: now)
        }
        takeDeferredBackoffs()
        guard finished > 0 else { return 0 }
        sink.metrics.inFlightChanged(by: -finished)
        if lostThisBatch {
            lostThisBatch = false
            failuresThisBatch.insert(.reset)
        }
        if !failuresThisBatch.isEmpty {
            for reason in failuresThisBatch { reportFailure(reason) }
            failuresThisBatch.removeAll(keepingCapacity: true)
        }
        if let cause = connectFailureThisBatch.take() {
            backOff(policy.handle(.connectFailed(now: now, unitRandom: Double.random(in: 0..<1, using: &random))), cause: cause)
        }
        checkRetiredConnections()
        releaseSlots()
        return finished
    }

    func finish(_ transfer: CurlTransfer, code: CURLcode, status: Int, now: UInt64) {
        guard var taken = transfer.pending.take() else { return }
        if transfer.sends > 0 {
            taken.wentOnWire = true
            if status == 0 { taken.unansweredOnWire = true }
        }
        let curlCode = Int(code.rawValue)
        // The one place an answer's body is read: for the decision here and for the caller.
        let errorBody = status >= 400 ? APNsErrorBody.parse(transfer.responseBody) : nil
        var freshConnection = false
        if status == 403, errorBody?.reason == .unrelatedKeyIdInToken {
            freshConnection = taken.unrelatedKeyConnections != .min && transfer.connectionID > taken.unrelatedKeyConnections
            // Every connection open now, idle ones in the pool included, has at most this id.
            taken.unrelatedKeyConnections = max(newestConnectionID, transfer.connectionID)
        }
        // A constant from here: passed on as a variable, it was copied for every call (a
        // retain and a release of each reference it holds).
        let pending = consume taken
        freeTransfers.append(transfer.index)
        noteResends(transfer)
        if transfer.heldBack { return holdBack(pending, transfer, now: now) }
        let disposition = TransferDisposition.decide(curlCode: curlCode, status: status, reason: errorBody?.reason,
                                                     attempts: pending.attempts, maxAttempts: configuration.maxAttempts,
                                                     answeredOnFreshConnection: freshConnection)
        if status == 0, curlCode != 0 {
            if let failure = ConnectionFailureReason(failedTransferCode: curlCode) { failuresThisBatch.insert(failure) }
            if transfer.connectionID >= 0 { _ = brokenConnections.insert(transfer.connectionID) }
        }
        if status != 0 {
            if case .backoffEnded(let failures) = policy.handle(.answered(connection: transfer.connectionID, now: now)) {
                sink.metrics.reconnectBackoffEnded(failures: failures)
            }
        }
        // The connection completed its TLS handshake and ended without ever answering.
        var endedAfterHandshake = false
        if disposition.connectionLost {
            let lost = unansweredConnection(of: transfer)
            endedAfterHandshake = lost.afterHandshake && lost.id >= 0 && !policy.hasAnswered(lost.id)
            let detail = { ": \(transfer.failureMessage(code)) (libcurl error \(curlCode))" }
            if endedAfterHandshake {
                connectFailureThisBatch.noteEndedAfterHandshake(ConnectionFailureCause("the connection ended before answering anything\(detail())",
                                                                                       endedAfterHandshake: true))
            }
            connectionLost(lost.id, localPort: transfer.localPort, now: now, deferred: false, unansweredBesides: 1, detail: detail())
        }
        if disposition.replaceConnection {
            let cause = status != 0 ? "HTTP \(status) \(errorBody?.reason?.rawValue ?? "")" : transfer.failureMessage(code)
            retire(transfer, failedAt: disposition.connectionFailed ? now : nil, cause: cause)
        }
        let duringHandshakeAfterClientCertificate = status == 0 && resetDuringHandshakeAfterClientCertificate(transfer, curlCode: curlCode)
        if disposition.connectFailed {
            sink.counters.connectFailures.add(1, ordering: .relaxed)
            connectFailureThisBatch.noteConnectFailure(ConnectionFailureCause("\(transfer.failureMessage(code)) (libcurl error \(curlCode))",
                                                                              endedDuringHandshakeAfterClientCertificate: duringHandshakeAfterClientCertificate))
        }
        // A retry that could not end by the request's answer deadline is not made: the request
        // is answered now, `notSent` when nothing of it went on the wire.
        let retry = disposition.retry && mayStart(pending, now: now)
        if disposition.retry, !retry, !pending.wentOnWire {
            transfer.responseBody.removeAll(keepingCapacity: true)
            answerPastDeadline(pending)
            return
        }
        if retry {
            sink.counters.retried.add(1, ordering: .relaxed)
            // An answer that asked for another connection (UnrelatedKeyIdInToken) lost none.
            if status != 0 {
                sink.metrics.requestRetried()
                sink.metrics.requestResent(afterAnswer: status, reason: errorBody?.reason)
            } else if !disposition.connectFailed {
                lostThisBatch = true
                // Sent again only if this attempt went on a connection: a request whose connect
                // or handshake failed was never sent, and is no resend.
                if transfer.sends > 0 {
                    sink.metrics.requestResent(TransportResend(reason: TransportResend.reason(curlCode: curlCode),
                                                               detail: "\(transfer.failureMessage(code)) (libcurl error \(curlCode))",
                                                               host: configuration.host))
                }
            }
            transfer.responseBody.removeAll(keepingCapacity: true)
            backlog.pushFront(consume pending)
            return
        }
        let outcome: DispatchResult.Outcome
        if curlCode == CurlResultCode.ok.rawValue || status != 0 {
            let body = transfer.responseBody
            if !body.isEmpty { transfer.responseBody = [] }
            outcome = .response(Response(status: status, apnsID: transfer.apnsID, body: body, errorBody: errorBody,
                                        channelID: transfer.channelID, uniqueID: transfer.uniqueID))
        } else {
            transfer.responseBody.removeAll(keepingCapacity: true)
            var error = TransportError(code: curlCode, message: transfer.failureMessage(code))
            error.endedAfterHandshake = endedAfterHandshake
            error.endedDuringHandshakeAfterClientCertificate = duringHandshakeAfterClientCertificate
            outcome = .transportFailure(error)
        }
        deliver(pending, outcome: outcome, timings: configuration.recordsTransferTimings ? timings(of: transfer, pending) : nil)
    }

    /// Whether the transfer's TLS handshake failed (CURLE_SSL_CONNECT_ERROR) because the server
    /// reset the connection (libcurl's CURLINFO_OS_ERRNO is ECONNRESET, or EPIPE for a write
    /// after the reset) once OpenSSL had written the client's certificate.
    func resetDuringHandshakeAfterClientCertificate(_ transfer: CurlTransfer, curlCode: Int) -> Bool {
        guard curlCode == CurlResultCode.sslConnectError.rawValue, transfer.sentClientCertificate else { return false }
        var socketError = 0
        guard pushd_curl_easy_getinfo_long(transfer.easy, CURLINFO_OS_ERRNO, &socketError) == CURLE_OK else { return false }
        return socketError == Int(ECONNRESET) || socketError == Int(EPIPE)
    }

    /// The connection a transfer that got no answer went on, and whether its TLS handshake was
    /// done. The pre-request callback names it once a request went on it, which libcurl allows
    /// only after the handshake; one that ended between its handshake and the first request
    /// (the server reset it before the client wrote) is known by libcurl's
    /// CURLINFO_APPCONNECT_TIME_T, set once the handshake completed, and CURLINFO_CONN_ID.
    func unansweredConnection(of transfer: CurlTransfer) -> (id: Int64, afterHandshake: Bool) {
        if transfer.connectionID >= 0 { return (transfer.connectionID, true) }
        var handshake: curl_off_t = 0
        var connection: curl_off_t = -1
        guard pushd_curl_easy_getinfo_off(transfer.easy, CURLINFO_APPCONNECT_TIME_T, &handshake) == CURLE_OK, handshake > 0,
              pushd_curl_easy_getinfo_off(transfer.easy, CURLINFO_CONN_ID, &connection) == CURLE_OK
        else { return (-1, false) }
        return (Int64(connection), true)
    }

    func timings(of transfer: CurlTransfer, _ pending: PendingRequest) -> TransferTimings {
        func microseconds(_ info: CURLINFO) -> Int64 {
            var value: curl_off_t = 0
            _ = pushd_curl_easy_getinfo_off(transfer.easy, info, &value)
            return Int64(value)
        }
        return TransferTimings(queuedNanoseconds: transfer.enteredCurlAt &- pending.submittedAt,
                               sentMicroseconds: microseconds(CURLINFO_POSTTRANSFER_TIME_T),
                               firstByteMicroseconds: microseconds(CURLINFO_STARTTRANSFER_TIME_T),
                               totalMicroseconds: microseconds(CURLINFO_TOTAL_TIME_T))
    }

    /// Connections have failed several times in a row: everything waiting here is handed back
    /// unsent, and the caller keeps it (pushd in its queue) until the server is back.
    /// Transfers inside libcurl that it has not begun to send (they wait for a connection) are
    /// taken back too; anything already sent stays to finish.
    func handBackWaiting(_ notSent: NotSent) {
        while let waiting = backlog.popFront() { deliver(waiting, outcome: Self.handedBack(waiting, notSent)) }
        var withdrawn = 0
        for other in transfers where other.sends == 0 {
            guard let waiting = other.pending else { continue }
            multi.remove(other.easy)
            other.pending = nil
            other.responseBody.removeAll(keepingCapacity: true)
            freeTransfers.append(other.index)
            withdrawn += 1
            deliver(waiting, outcome: Self.handedBack(waiting, notSent))
        }
        if withdrawn > 0 {
            inCurl -= withdrawn
            sink.metrics.inFlightChanged(by: -withdrawn)
        }
    }

    /// What a request handed back from the queue is answered: `notSent` when no attempt of it
    /// went on the wire unanswered (none went, or APNs answered each one that did); else a
    /// transport failure, as `answerPastDeadline` says, since an earlier attempt, on a
    /// connection that ended unanswered, may have reached the server. Called not sent, it was
    /// taken for never delivered: a campaign's chunk took it back to send with a fresh retry window.
    /// The failure's code is CURLE_GOT_NOTHING, which `TransportFailureKind` takes for an
    /// unreachable server whatever the message: the message quotes the last failed connection,
    /// and a TLS alert quoted there (code 56 is judged by its message) paused the app, where
    /// the same hand-back called not sent waits for APNs like the rest.
    static func handedBack(_ pending: PendingRequest, _ notSent: NotSent) -> DispatchResult.Outcome {
        guard pending.unansweredOnWire else { return .notSent(notSent) }
        var error = TransportError(code: CurlResultCode.gotNothing.rawValue,
                                   message: "a connection ended without answering it, which may have reached the server, and then \(notSent.description.dropFirst("not sent: ".count))")
        error.endedAfterHandshake = notSent.lastFailureEndedAfterHandshake
        error.endedDuringHandshakeAfterClientCertificate = notSent.lastFailureEndedDuringHandshakeAfterClientCertificate
        return .transportFailure(error)
    }

    func deliver(_ pending: PendingRequest, outcome: DispatchResult.Outcome, timings: TransferTimings? = nil) {
        sink.deliver(pending, outcome: outcome, timings: timings)
        slotsToRelease += 1
    }

    /// Returns the window slots of everything delivered since the last call, in one go.
    func releaseSlots() {
        if slotsToRelease > 0 {
            outstanding.subtract(slotsToRelease, ordering: .relaxed)
            sink.window.release(slotsToRelease)
            slotsToRelease = 0
        }
    }
}
