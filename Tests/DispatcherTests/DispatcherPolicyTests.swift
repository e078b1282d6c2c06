import APNs
@testable import Dispatcher
import Testing

@Suite struct ReconnectBackoffTests {
    @Test func delayDoublesPerFailureUpToTheCap() {
        let backoff = ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0)
        #expect(backoff.delayMilliseconds(afterFailures: 0, unitRandom: 0.3) == 0)
        #expect(backoff.delayMilliseconds(afterFailures: 1, unitRandom: 0.3) == 100)
        #expect(backoff.delayMilliseconds(afterFailures: 2, unitRandom: 0.3) == 200)
        #expect(backoff.delayMilliseconds(afterFailures: 4, unitRandom: 0.3) == 800)
        #expect(backoff.delayMilliseconds(afterFailures: 5, unitRandom: 0.3) == 1000)
        #expect(backoff.delayMilliseconds(afterFailures: 500, unitRandom: 0.3) == 1000)
    }

    @Test func jitterSpreadsTheDelayBelowTheFullValueButNeverUnderItsLowerBound() {
        let backoff = ReconnectBackoff(initialMilliseconds: 1000, maxMilliseconds: 60_000, jitter: 0.5)
        #expect(backoff.delayMilliseconds(afterFailures: 1, unitRandom: 0) == 1000)
        #expect(backoff.delayMilliseconds(afterFailures: 1, unitRandom: 0.5) == 750)
        #expect(backoff.delayMilliseconds(afterFailures: 1, unitRandom: 0.999_999) == 500)
        #expect(backoff.delayMilliseconds(afterFailures: 1, unitRandom: 7) == 500)
    }
}

@Suite struct TransferDispositionTests {
    private func decide(code: Int = 0, status: Int, reason: String? = nil, attempts: Int = 1, max: Int = 3) -> TransferDisposition {
        TransferDisposition.decide(curlCode: code, status: status, reason: reason.map { APNsReason($0) }, attempts: attempts, maxAttempts: max)
    }

    @Test func answeredRequestsAreDeliveredAsTheyAre() {
        #expect(decide(status: 200) == .deliver)
        #expect(decide(status: 400, reason: "BadDeviceToken") == .deliver)
        #expect(decide(status: 410, reason: "Unregistered") == .deliver)
        #expect(decide(status: 429, reason: "TooManyRequests") == .deliver)
        #expect(decide(status: 500, reason: "InternalServerError") == .deliver)
    }

    @Test func answersThatCondemnTheConnectionAskForAFreshOneAndAreStillDelivered() {
        for (status, reason) in [(503, "Shutdown"), (400, "IdleTimeout"),
                                 (403, "ExpiredProviderToken"), (429, "TooManyProviderTokenUpdates")] {
            let disposition = decide(status: status, reason: reason)
            #expect(disposition.replaceConnection, "\(status) \(reason)")
            #expect(!disposition.retry, "\(status) \(reason)")
        }
    }

    /// APNs: "To use this token, open a new connection." The request goes again on another
    /// connection; answered so on a connection opened after that, it reaches the caller.
    @Test func unrelatedKeyIdInTokenIsSentAgainOnANewConnectionOnce() {
        let first = TransferDisposition.decide(curlCode: 0, status: 403, reason: .unrelatedKeyIdInToken, attempts: 1, maxAttempts: 3)
        #expect(first == TransferDisposition(retry: true, replaceConnection: true, connectFailed: false))
        let again = TransferDisposition.decide(curlCode: 0, status: 403, reason: .unrelatedKeyIdInToken, attempts: 2, maxAttempts: 3,
                                               answeredOnFreshConnection: true)
        #expect(again == TransferDisposition(retry: false, replaceConnection: true, connectFailed: false))
        // Another connection opened before the first answer (it had the old key too) is no fresh one.
        let stale = TransferDisposition.decide(curlCode: 0, status: 403, reason: .unrelatedKeyIdInToken, attempts: 2, maxAttempts: 3)
        #expect(stale.retry && stale.replaceConnection)
        // Out of attempts, the answer is the caller's whatever the connection.
        #expect(!TransferDisposition.decide(curlCode: 0, status: 403, reason: .unrelatedKeyIdInToken, attempts: 3, maxAttempts: 3).retry)
        // The reason under another status is not APNs's.
        #expect(decide(status: 400, reason: "UnrelatedKeyIdInToken") == .deliver)
    }

    @Test func aRetiringReasonUnderAnotherStatusKeepsTheConnection() {
        #expect(decide(status: 400, reason: "ExpiredProviderToken") == .deliver)
        #expect(decide(status: 403, reason: "IdleTimeout") == .deliver)
        #expect(decide(status: 429, reason: "TooManyRequests") == .deliver)
    }

    @Test func unansweredStreamsAreRetriedUntilAttemptsRunOut() {
        for code in [16, 92, 55, 56, 52, 18] {
            #expect(decide(code: code, status: 0, attempts: 1)
                    == TransferDisposition(retry: true, replaceConnection: false, connectFailed: false, connectionLost: true))
            // The last attempt is answered with its failure; its connection still ended unanswered.
            #expect(decide(code: code, status: 0, attempts: 3)
                    == TransferDisposition(retry: false, replaceConnection: false, connectFailed: false, connectionLost: true))
        }
    }

    @Test func connectFailuresBackOffAndRetry() {
        for code in [5, 6, 7, 35] {
            #expect(decide(code: code, status: 0, attempts: 1) == TransferDisposition(retry: true, replaceConnection: false, connectFailed: true))
            #expect(decide(code: code, status: 0, attempts: 3).connectFailed)
            #expect(!decide(code: code, status: 0, attempts: 3).retry)
        }
    }

    @Test func certificateProblemsAreNotRetried() {
        #expect(decide(code: 60, status: 0) == .deliver)
        #expect(decide(code: 58, status: 0) == .deliver)
    }

    @Test func aTransportErrorAfterTheResponseHeaderIsNotRetried() {
        #expect(decide(code: 56, status: 200) == .deliver)
    }
}

/// `Response` reads error bodies with the APNs module's `APNsErrorBody` (tested in full there).
@Suite struct ResponseBodyTests {
    @Test func readsReasonAndTimestampOfAnAPNsErrorBody() {
        let body = Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8)
        let response = Response(status: 410, apnsID: nil, body: body)
        #expect(response.reason == "Unregistered")
        #expect(response.timestampMilliseconds == 1_700_000_000_123)
    }

    @Test func nestedMembersOfTheSameNameAndEscapesAreReadCorrectly() {
        let body = Array(#"{ "other": {"reason": "inner"}, "note": "reason", "reason" : "Bad\"Topic" }"#.utf8)
        #expect(Response(status: 400, apnsID: nil, body: body).reason == "Bad\"Topic")
    }

    @Test func missingOrMalformedValuesGiveNil() {
        func response(_ text: String) -> Response { Response(status: 400, apnsID: nil, body: Array(text.utf8)) }
        #expect(Response(status: 200, apnsID: nil, body: []).reason == nil)
        #expect(response(#"{"reason":12}"#).reason == nil)
        #expect(response(#"{"reason":"unterminated"#).reason == nil)
        #expect(response(#"{"timestamp":"x"}"#).timestampMilliseconds == nil)
        #expect(response(#"{"timestamp":99999999999999999999999}"#).timestampMilliseconds == nil)
    }
}

@Suite struct DispatchRequestTests {
    @Test func packsPathAndHeaderLinesAndKeepsThemReadable() throws {
        let request = try DispatchRequest(path: "/3/device/abc", headerLines: ["apns-topic: com.example", "apns-push-type: alert"], body: [1, 2])
        #expect(request.path == "/3/device/abc")
        #expect(request.headerLines == ["apns-topic: com.example", "apns-push-type: alert"])
        #expect(request.body == [1, 2])
    }

    @Test func rejectsMalformedPathsAndHeadersNamingThem() {
        #expect(throws: DispatchRequestError.pathNotAbsolute("3/device")) { try DispatchRequest(path: "3/device", headerLines: [], body: []) }
        #expect(throws: DispatchRequestError.invalidPathByte("/a b")) { try DispatchRequest(path: "/a b", headerLines: [], body: []) }
        // Sent as the request target without encoding: a byte outside ASCII would reach the server raw.
        #expect(throws: DispatchRequestError.invalidPathByte("/caf\u{e9}")) { try DispatchRequest(path: "/caf\u{e9}", headerLines: [], body: []) }
        #expect(throws: DispatchRequestError.malformedHeaderLine(index: 1, line: "novalue")) {
            try DispatchRequest(path: "/", headerLines: ["a: b", "novalue"], body: [])
        }
        #expect(throws: DispatchRequestError.malformedHeaderLine(index: 0, line: "a: b\r\nx: y")) {
            try DispatchRequest(path: "/", headerLines: ["a: b\r\nx: y"], body: [])
        }
    }
}

@Suite struct RingBufferTests {
    @Test func keepsOrderAcrossGrowthAndFrontInsertion() {
        var ring = RingBuffer<Int>(capacity: 2)
        for value in 1...5 { ring.pushBack(value) }
        ring.pushFront(0)
        var seen: [Int] = []
        while let value = ring.popFront() { seen.append(value) }
        #expect(seen == [0, 1, 2, 3, 4, 5])
        #expect(ring.isEmpty)
    }
}

@Suite struct DispatcherConfigurationTests {
    @Test func aHostLibcurlCannotParseIsRejectedAtStartNamingTheField() {
        #expect {
            _ = try HTTP2Dispatcher(configuration: DispatcherConfiguration(host: "bad<host", threads: 1))
        } throws: { error in
            guard case .invalid(let field, let value, _)? = error as? DispatcherConfigurationError else { return false }
            return field == "host" && value == "bad<host"
        }
    }

    @Test func invalidSettingsNameTheField() {
        #expect(throws: DispatcherConfigurationError.invalid(field: "port", value: "0", expected: "1…65535 (APNs uses 443 or 2197)")) {
            try DispatcherConfiguration(host: "127.0.0.1", port: 0).validate()
        }
        #expect(throws: DispatcherConfigurationError.invalid(field: "proxy", value: "socks5://x", expected: "an http:// or https:// URL")) {
            try DispatcherConfiguration(host: "127.0.0.1", proxy: "socks5://x").validate()
        }
        #expect(throws: DispatcherConfigurationError.unreadableFile(field: "trustedCAFile", path: "/nonexistent/ca.pem")) {
            try DispatcherConfiguration(host: "127.0.0.1", trustedCAFile: "/nonexistent/ca.pem").validate()
        }
    }
}

@Suite struct WindowGateTests {
    @Test func slotsAreRefusedWhenTakenAndReturnedInBatches() {
        let gate = WindowGate(capacity: 3)
        #expect(gate.tryAcquire())
        #expect(gate.tryAcquire())
        #expect(gate.tryAcquire())
        #expect(!gate.tryAcquire())
        gate.release(2)
        #expect(gate.tryAcquire())
        #expect(gate.tryAcquire())
        #expect(!gate.tryAcquire())
    }

    @Test func aBlockedAcquireResumesWhenSlotsAreReleased() async {
        let gate = WindowGate(capacity: 1)
        gate.acquire()
        let waiter = Task.detached { gate.acquire(); return true }
        try? await Task.sleep(nanoseconds: 50_000_000)
        gate.release(1)
        #expect(await waiter.value)
    }
}

/// Whether requests libcurl moved off a connection were refused before its SETTINGS were read
/// or ended by a GOAWAY is judged by how many answers the connection gave, not by when the
/// requests entered libcurl: a request can wait inside libcurl and go out long after.
@Suite struct AnswerCountsTests {
    @Test func aConnectionThatAnsweredAtMostOnceRefusedAndOneThatAnsweredMoreWasEnded() {
        var counts = ConnectionChurn()
        counts.answered(on: 3, heard: false, now: 0)
        for _ in 0..<700 { counts.answered(on: 4, heard: false, now: 0) }
        #expect(counts.refusedBeforeAnswering(3))
        #expect(!counts.refusedBeforeAnswering(4))
        // Never answered, newer or older than those that did: refused.
        #expect(counts.refusedBeforeAnswering(9))
        #expect(counts.refusedBeforeAnswering(1))
    }

    @Test func aConnectionOlderThanEveryOneRememberedCountsAsHavingAnswered() {
        var counts = ConnectionChurn(capacity: 4)
        for connection in Int64(10)..<20 {
            counts.answered(on: connection, heard: false, now: 0)
            counts.answered(on: connection, heard: true, now: 0)
            counts.answered(on: connection, heard: false, now: 0)
        }
        #expect(!counts.refusedBeforeAnswering(2))
        #expect(!counts.refusedBeforeAnswering(19))
        // Between the remembered ones, absent: it never answered.
        counts.answered(on: 25, heard: false, now: 0)
        #expect(counts.refusedBeforeAnswering(22))
    }
}
