import APNs
import Testing

@Suite struct APNsResponseTests {
    @Test func parsesReasonAndTimestamp() {
        let r = APNsResponse(status: 410, apnsID: "x", body: Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8))
        #expect(r.reason == .unregistered)
        #expect(r.timestamp == 1_700_000_000_123)
        #expect(r.action == .pruneToken(timestamp: 1_700_000_000_123))
    }

    @Test func unknownReasonIsCarried() {
        let r = APNsResponse(status: 400, body: Array(#"{"reason":"BrandNewReason"}"#.utf8))
        #expect(r.reason?.rawValue == "BrandNewReason")
    }

    @Test(arguments: ["", "not json", "[]", "{", #"{"reason":5}"#, #"{"reason":"A","reason":"B"}"#, "\u{0}"])
    func unreadableBodiesLeaveReasonEmpty(body: String) {
        let r = APNsResponse(status: 400, body: Array(body.utf8))
        #expect(r.reason == nil)
        #expect(r.action == .retry)
    }

    @Test func oddTimestampsAreTolerated() {
        #expect(APNsErrorBody.parse(Array(#"{"reason":"Unregistered","timestamp":"1700"}"#.utf8))?.timestamp == 1700)
        #expect(APNsErrorBody.parse(Array(#"{"reason":"Unregistered","timestamp":1.7e12}"#.utf8))?.timestamp == 1_700_000_000_000)
        #expect(APNsErrorBody.parse(Array(#"{"reason":"Unregistered","timestamp":1e300}"#.utf8))?.timestamp == nil)
        #expect(APNsErrorBody.parse(Array(#"{"reason":"Unregistered","timestamp":true}"#.utf8))?.reason == .unregistered)
    }

    @Test func errorBodyRendersAsAPNsSendsIt() {
        #expect(APNsErrorBody(reason: .unregistered, timestamp: 12).bytes == Array(#"{"reason":"Unregistered","timestamp":12}"#.utf8))
        #expect(APNsErrorBody(reason: .badDeviceToken).bytes == Array(#"{"reason":"BadDeviceToken"}"#.utf8))
    }
}
