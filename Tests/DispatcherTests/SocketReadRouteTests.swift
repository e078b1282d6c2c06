@testable import Dispatcher
import Testing

/// `SocketReadRoute`: which socket events a loop reads through one transfer instead of handing
/// them to libcurl, which runs every transfer on the socket. Plain values, no sockets.
@Suite struct SocketReadRouteTests {
    private func route() -> SocketReadRoute { SocketReadRoute(enabled: true, minimumInFlight: 100) }

    @Test func aReadableSocketWithManyStreamsInFlightIsReadThroughOneTransfer() {
        #expect(route().throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
    }

    @Test func writableFailedOrFewStreamsGoToLibcurlAsTheyAre() {
        let route = route()
        #expect(!route.throughOneTransfer(readable: true, writable: true, failed: false, inFlight: 500))
        #expect(!route.throughOneTransfer(readable: false, writable: true, failed: false, inFlight: 500))
        #expect(!route.throughOneTransfer(readable: true, writable: false, failed: true, inFlight: 500))
        #expect(!route.throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 99))
        #expect(!SocketReadRoute(enabled: false, minimumInFlight: 100)
            .throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
    }

    @Test func aReadThatFinishedNothingSendsTheNextEventToLibcurl() {
        var route = route()
        route.roundFinished(throughOneTransfer: true, answered: 0, unanswered: 0)
        #expect(!route.throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
        // libcurl's own round ends the fallback.
        route.roundFinished(throughOneTransfer: false, answered: 0, unanswered: 0)
        #expect(route.throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
    }

    @Test func aRequestFinishedWithoutAnAnswerSendsTheNextEventToLibcurl() {
        var route = route()
        // A broken connection: every transfer on it must see the event to fail.
        route.roundFinished(throughOneTransfer: true, answered: 30, unanswered: 1)
        #expect(!route.throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
    }

    @Test func readsThatFinishAnswersKeepGoingThroughOneTransfer() {
        var route = route()
        for _ in 0..<3 { route.roundFinished(throughOneTransfer: true, answered: 40, unanswered: 0) }
        #expect(route.throughOneTransfer(readable: true, writable: false, failed: false, inFlight: 500))
    }
}
