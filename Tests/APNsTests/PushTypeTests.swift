import APNs
import Testing

@Suite struct PushTypeTests {
    static let table: [(PushType, String?, Int)] = [
        (.alert, "", 4096),
        (.background, "", 4096),
        (.voip, ".voip", 5120),
        (.complication, ".complication", 4096),
        (.fileprovider, ".pushkit.fileprovider", 4096),
        (.mdm, nil, 4096),
        (.location, ".location-query", 4096),
        (.liveactivity, ".push-type.liveactivity", 4096),
        (.pushtotalk, ".voip-ptt", 4096),
        (.widgets, ".push-type.widgets", 4096),
        (.controls, ".push-type.controls", 4096),
    ]

    @Test func everyPushTypeIsInTheTable() {
        #expect(Set(PushTypeTests.table.map(\.0)) == Set(PushType.allCases))
        #expect(PushType.allCases.count == 11)
    }

    @Test(arguments: PushTypeTests.table)
    func suffixLimitAndTopicAcceptance(type: PushType, suffix: String?, limit: Int) {
        #expect(type.topicSuffix == suffix)
        #expect(type.maxPayloadSize == limit)
        if let suffix {
            let topic = "com.example.app" + suffix
            #expect(type.accepts(topic: topic))
            #expect(type.topic(forBundleID: "com.example.app") == topic)
            #expect(type.bundleID(fromTopic: topic) == "com.example.app")
            #expect(!type.accepts(topic: suffix.isEmpty ? "" : suffix), "a bare suffix is not a topic")
        } else {
            #expect(type.accepts(topic: "com.apple.mgmt.External.1234"))
        }
    }

    @Test(arguments: PushType.allCases.filter { $0.topicSuffix?.isEmpty == false })
    func bundleIDTopicsRejectOtherTypesSuffixes(type: PushType) {
        let topic = "com.example.app" + (type.topicSuffix ?? "")
        #expect(!PushType.alert.accepts(topic: topic))
        #expect(PushType.typeOwningSuffix(of: topic) == type)
    }

    @Test func pushToTalkSuffixIsNotMistakenForVoIP() {
        #expect(!PushType.voip.accepts(topic: "com.example.app.voip-ptt"))
        #expect(PushType.pushtotalk.accepts(topic: "com.example.app.voip-ptt"))
    }
}
