import APNs
import Testing

@Suite struct PayloadTests {
    static func text(_ payload: Payload) -> String { String(decoding: payload.bytes, as: UTF8.self) }

    @Test func everyAPSKeyRendersInCompactJSON() throws {
        var payload = Payload(aps: APS(
            alert: .fields(Alert(title: "T", subtitle: "S", body: "B", launchImage: "L.png",
                                 titleLocKey: "TK", titleLocArgs: ["a"], subtitleLocKey: "SK", subtitleLocArgs: ["b"],
                                 locKey: "K", locArgs: ["c", "d"])),
            badge: 3,
            sound: .critical(CriticalSound(name: "alarm.caf", volume: 0.5)),
            threadID: "th",
            category: "cat",
            contentAvailable: true,
            mutableContent: true,
            targetContentID: "win",
            interruptionLevel: .timeSensitive,
            relevanceScore: 0.25,
            filterCriteria: "work"))
        payload.set("gameID", "12345678")
        #expect(Self.text(payload) == #"{"aps":{"alert":{"title":"T","subtitle":"S","body":"B","launch-image":"L.png","title-loc-key":"TK","title-loc-args":["a"],"subtitle-loc-key":"SK","subtitle-loc-args":["b"],"loc-key":"K","loc-args":["c","d"]},"badge":3,"sound":{"critical":1,"name":"alarm.caf","volume":0.5},"thread-id":"th","category":"cat","content-available":1,"mutable-content":1,"target-content-id":"win","interruption-level":"time-sensitive","relevance-score":0.25,"filter-criteria":"work"},"gameID":"12345678"}"#)
        #expect(try JSONValue.parse(payload.bytes).objectValue?["aps"]?.objectValue?.count == 11)
    }

    @Test func liveActivityKeysRender() {
        let payload = Payload(aps: APS(
            alert: .fields(Alert(title: "Delivery", body: "Arriving")),
            relevanceScore: 75,
            timestamp: 1_700_000_000,
            event: .start,
            contentState: JSONObject(["eta": 5, "driver": "Anne"]),
            staleDate: 1_700_000_600,
            dismissalDate: 1_700_003_600,
            attributesType: "DeliveryAttributes",
            attributes: JSONObject(["orderID": "1042"]),
            inputPushToken: true))
        #expect(Self.text(payload) == #"{"aps":{"alert":{"title":"Delivery","body":"Arriving"},"relevance-score":75,"timestamp":1700000000,"event":"start","content-state":{"eta":5,"driver":"Anne"},"stale-date":1700000600,"dismissal-date":1700003600,"attributes-type":"DeliveryAttributes","attributes":{"orderID":"1042"},"input-push-token":1}}"#)
    }

    @Test func stringsAreEscapedAndUnicodeStaysRawUTF8() throws {
        let tricky = "quote\" backslash\\ newline\n tab\t bell\u{07} nul\u{0} 推送 😀 /"
        let payload = Payload(aps: APS(alert: .text(tricky)))
        #expect(Self.text(payload) == "{\"aps\":{\"alert\":\"quote\\\" backslash\\\\ newline\\n tab\\t bell\\u0007 nul\\u0000 推送 😀 /\"}}")
        #expect(try JSONValue.parse(payload.bytes).objectValue?["aps"]?.objectValue?["alert"] == .string(tricky))
    }

    @Test func emptyAPSIsOmittedForDataOnlyPayloads() {
        #expect(Self.text(Payload().with("mdm", "push-magic")) == #"{"mdm":"push-magic"}"#)
        #expect(Self.text(Payload()) == "{}")
    }

    @Test func customKeysKeepOrderAndCannotShadowAPS() {
        let payload = Payload(aps: APS(badge: 0)).with("b", 1).with("a", [true, nil, 1.5]).with("aps", "ignored").with("b", 2)
        #expect(Self.text(payload) == #"{"aps":{"badge":0},"b":2,"a":[true,null,1.5]}"#)
    }

    @Test func extraAPSKeysComeAfterDocumentedOnes() {
        let payload = Payload(aps: APS(alert: "x", extra: JSONObject(["future-key": "v", "alert": "dup"])))
        #expect(Self.text(payload) == #"{"aps":{"alert":"x","future-key":"v"}}"#)
    }

    @Test func nonFiniteNumbersNeverProduceInvalidJSON() throws {
        let payload = Payload(aps: APS(relevanceScore: .infinity)).with("n", .double(.nan))
        _ = try JSONValue.parse(payload.bytes)
    }

    @Test func shortcuts() {
        #expect(Self.text(.alert(title: "Shipped", body: "Order 1042 is on its way")) == #"{"aps":{"alert":{"title":"Shipped","body":"Order 1042 is on its way"}}}"#)
        #expect(Self.text(.background()) == #"{"aps":{"content-available":1}}"#)
    }
}
