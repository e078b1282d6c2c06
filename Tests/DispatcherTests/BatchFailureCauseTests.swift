@testable import Dispatcher
import Testing

/// Which cause a completion batch's connect failures give their backoff: the most specific
/// fact seen in the batch, whatever came first.
@Suite struct BatchFailureCauseTests {
    static let refused = ConnectionFailureCause("Failed to connect to api.push.apple.com port 443: Connection refused (libcurl error 7)")
    static let handshakeReset = ConnectionFailureCause("Recv failure: Connection reset by peer (libcurl error 35)",
                                                       endedDuringHandshakeAfterClientCertificate: true)
    static let otherHandshakeReset = ConnectionFailureCause("Send failure: Broken pipe (libcurl error 35)",
                                                            endedDuringHandshakeAfterClientCertificate: true)
    static let endedAfterHandshake = ConnectionFailureCause("the connection ended before answering anything: Recv failure: Connection reset by peer (libcurl error 56)",
                                                            endedAfterHandshake: true)

    static func cause(of batch: (inout BatchFailureCause) -> Void) -> ConnectionFailureCause? {
        var selection = BatchFailureCause()
        batch(&selection)
        return selection.take()
    }

    @Test func aHandshakeResetAfterAPlainConnectFailureGivesTheCause() {
        #expect(Self.cause { $0.noteConnectFailure(Self.refused); $0.noteConnectFailure(Self.handshakeReset) } == Self.handshakeReset)
        #expect(Self.cause { $0.noteConnectFailure(Self.handshakeReset); $0.noteConnectFailure(Self.refused) } == Self.handshakeReset)
    }

    @Test func theFirstOfEquallySpecificCausesIsKept() {
        #expect(Self.cause { $0.noteConnectFailure(Self.refused) } == Self.refused)
        #expect(Self.cause { $0.noteConnectFailure(Self.handshakeReset); $0.noteConnectFailure(Self.otherHandshakeReset) } == Self.handshakeReset)
    }

    @Test func aConnectionEndedAfterItsHandshakeInTheBatchOutranksAPlainConnectFailure() {
        #expect(Self.cause { $0.noteConnectFailure(Self.refused); $0.noteEndedAfterHandshake(Self.endedAfterHandshake) } == Self.endedAfterHandshake)
        #expect(Self.cause { $0.noteEndedAfterHandshake(Self.endedAfterHandshake); $0.noteConnectFailure(Self.refused) } == Self.endedAfterHandshake)
        // The reset inside the handshake says more: the certificate went out and was not taken.
        #expect(Self.cause { $0.noteEndedAfterHandshake(Self.endedAfterHandshake); $0.noteConnectFailure(Self.handshakeReset) } == Self.handshakeReset)
    }

    @Test func withoutAConnectFailureTheBatchDoesNotBackOff() {
        #expect(Self.cause { $0.noteEndedAfterHandshake(Self.endedAfterHandshake) } == nil)
        #expect(Self.cause { _ in } == nil)
    }

    @Test func takingEmptiesItForTheNextBatch() {
        var selection = BatchFailureCause()
        selection.noteConnectFailure(Self.handshakeReset)
        #expect(selection.take() == Self.handshakeReset)
        selection.noteEndedAfterHandshake(Self.endedAfterHandshake)
        #expect(selection.take() == nil)
        selection.noteConnectFailure(Self.refused)
        #expect(selection.take() == Self.refused)
    }
}
