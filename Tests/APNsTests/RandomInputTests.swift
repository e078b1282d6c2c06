import APNs
import Testing

/// Property-style checks: whatever arrives, parsing and validation answer, never trap.
@Suite struct RandomInputTests {
    static let token = TestSupport.token()

    static func randomBytes(_ rng: inout SeededGenerator, maxLength: Int) -> [UInt8] {
        let length = Int.random(in: 0...maxLength, using: &rng)
        return (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Bytes drawn mostly from JSON's own alphabet, so the parser gets deep into documents.
    static func jsonishBytes(_ rng: inout SeededGenerator, maxLength: Int) -> [UInt8] {
        let alphabet = Array("{}[]\":,0123456789-+.eE \\/utnrfalsebaps\u{7f}".utf8) + [0xC3, 0xA9, 0xE6, 0x8E, 0xA8, 0xF0, 0x9F, 0x00, 0x0A]
        let length = Int.random(in: 0...maxLength, using: &rng)
        return (0..<length).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &rng)] }
    }

    static func randomJSON(_ rng: inout SeededGenerator, depth: Int) -> JSONValue {
        let pick = Int.random(in: 0..<(depth > 4 ? 4 : 7), using: &rng)
        switch pick {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &rng))
        case 2: return Bool.random(using: &rng) ? .int(Int.random(in: -1_000_000...1_000_000, using: &rng)) : .double(Double.random(in: -2...2, using: &rng))
        case 3: return .string(randomString(&rng))
        case 4, 5:
            let keys = ["aps", "alert", "badge", "sound", "content-available", "mutable-content", "critical", "name", "volume",
                        "interruption-level", "relevance-score", "timestamp", "event", "content-state", "title", "loc-args", "x"]
            var object = JSONObject()
            for _ in 0..<Int.random(in: 0...5, using: &rng) {
                object.set(keys[Int.random(in: 0..<keys.count, using: &rng)], randomJSON(&rng, depth: depth + 1))
            }
            return .object(object)
        default:
            return .array((0..<Int.random(in: 0...4, using: &rng)).map { _ in randomJSON(&rng, depth: depth + 1) })
        }
    }

    static func randomString(_ rng: inout SeededGenerator) -> String {
        let pieces = ["a", "推", "\"", "\\", "\n", "\u{0}", "😀", "é", "critical", "time-sensitive", "update", "1"]
        return (0..<Int.random(in: 0...6, using: &rng)).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &rng)] }.joined()
    }

    static func exerciseEverything(_ bytes: [UInt8], pushType: PushType) {
        _ = try? JSONValue.parse(bytes)
        _ = JSONParser.checkObject(bytes)
        _ = APNsErrorBody.parse(bytes)
        _ = APNsResponse(status: 400, body: bytes).action
        let n = APNsNotification(token: token, topic: pushType.topic(forBundleID: "com.example.app") ?? "com.apple.mgmt.x",
                                 pushType: pushType, priority: .conservePower, payload: bytes)
        _ = NotificationValidator.issues(in: n)
        _ = APNsRequestValidator().validate(method: "POST", path: n.path, headers: n.headerFields(authorization: nil), body: bytes)
        let text = String(decoding: bytes, as: UTF8.self)
        _ = try? DecodedProviderToken(jwt: text)
        _ = try? DeviceToken(text)
        _ = Base64URL.decode(bytes)
        _ = ECDSASignature.rawFromDER(bytes)
        _ = APNsRequestValidator().validate(method: text, path: text, headers: [HeaderField(name: text, value: text)], body: bytes)
    }

    @Test func randomBytesNeverCrashParsersOrValidators() {
        var rng = SeededGenerator(seed: 0xA9_05)
        for i in 0..<4000 {
            let bytes = i % 2 == 0 ? Self.randomBytes(&rng, maxLength: 300) : Self.jsonishBytes(&rng, maxLength: 300)
            Self.exerciseEverything(bytes, pushType: PushType.allCases[i % PushType.allCases.count])
        }
    }

    @Test func randomJSONRoundTripsAndValidatesWithoutCrashing() throws {
        var rng = SeededGenerator(seed: 0x50_17)
        var accepted = 0
        for i in 0..<2000 {
            let value = Self.randomJSON(&rng, depth: 0)
            let bytes = value.compactBytes
            #expect(try JSONValue.parse(bytes) == value)
            let pushType = PushType.allCases[i % PushType.allCases.count]
            let n = APNsNotification(token: Self.token, topic: pushType.topic(forBundleID: "com.example.app") ?? "com.apple.mgmt.x",
                                     pushType: pushType, priority: .conservePower, payload: bytes)
            let issues = NotificationValidator.issues(in: n)
            if case .object = value {
                #expect(!issues.contains { $0.rule == .payloadNotJSONObject })
            } else {
                #expect(issues.contains { $0.rule == .payloadNotJSONObject || $0.rule == .payloadTooLarge })
            }
            if issues.isEmpty { accepted += 1 }
        }
        #expect(accepted > 0, "some random objects are valid payloads")
    }

    /// Anything the sending-side validator lets through, the APNs-side check accepts.
    @Test func clientValidationIsAtLeastAsStrictAsTheServer() {
        var rng = SeededGenerator(seed: 0xC0_DE)
        var checked = 0
        for i in 0..<3000 {
            let pushType = PushType.allCases[i % PushType.allCases.count]
            var object = Self.randomJSON(&rng, depth: 1).objectValue ?? JSONObject()
            if Bool.random(using: &rng) { object.set("aps", ["content-available": 1, "timestamp": 1, "event": "end"]) }
            if pushType == .mdm { object.set("mdm", "magic") }
            let priority = Priority.allCases[Int.random(in: 0..<3, using: &rng)]
            let n = APNsNotification(token: Self.token, topic: pushType.topic(forBundleID: "com.example.app") ?? "com.apple.mgmt.x",
                                     pushType: pushType, priority: priority, expiration: Int64.random(in: 0...2_000_000_000, using: &rng),
                                     collapseID: Bool.random(using: &rng) ? Self.randomString(&rng) : nil, apnsID: .init(),
                                     payload: JSONValue.object(object).compactBytes)
            guard NotificationValidator.issues(in: n).isEmpty else { continue }
            checked += 1
            let verdict = APNsRequestValidator().validate(method: "POST", path: n.path, headers: n.headerFields(authorization: nil), body: n.payload)
            if case .rejected = verdict { Issue.record("client accepted what the server rejects: \(verdict) for \(n)") }
        }
        #expect(checked > 100)
    }

    /// Whatever strings and numbers go into the builder, the bytes are one valid JSON object
    /// that reads back to the same values.
    @Test func builtPayloadsAreAlwaysValidJSON() throws {
        var rng = SeededGenerator(seed: 0xB1_7D)
        func maybe<T>(_ make: () -> T) -> T? { Bool.random(using: &rng) ? make() : nil }
        for _ in 0..<1500 {
            let alert: AlertContent? = Bool.random(using: &rng)
                ? .text(Self.randomString(&rng))
                : .fields(Alert(title: maybe { Self.randomString(&rng) }, subtitle: maybe { Self.randomString(&rng) },
                                body: maybe { Self.randomString(&rng) }, locKey: maybe { Self.randomString(&rng) },
                                locArgs: maybe { [Self.randomString(&rng), Self.randomString(&rng)] }))
            let aps = APS(
                alert: alert, badge: maybe { Int.random(in: 0...1000, using: &rng) },
                sound: maybe { .critical(CriticalSound(name: Self.randomString(&rng), volume: Double.random(in: 0...1, using: &rng))) },
                threadID: maybe { Self.randomString(&rng) }, category: maybe { Self.randomString(&rng) },
                mutableContent: Bool.random(using: &rng), interruptionLevel: InterruptionLevel.allCases.randomElement(using: &rng),
                relevanceScore: maybe { Double.random(in: 0...1, using: &rng) })
            let payload = Payload(aps: aps).with(Self.randomString(&rng), Self.randomJSON(&rng, depth: 2))
            let parsed = try JSONValue.parse(payload.bytes)
            #expect(parsed == .object(payload.jsonObject))
            let n = APNsNotification(token: Self.token, topic: "com.example.app", pushType: .alert, priority: .immediate, payload: payload)
            let issues = NotificationValidator.issues(in: n).filter { $0.rule != .payloadTooLarge }
            #expect(issues.isEmpty, "\(issues)")
        }
    }

    @Test func mutatedValidPayloadsNeverCrash() {
        var rng = SeededGenerator(seed: 0x3E_ED)
        let seeds: [[UInt8]] = [
            Payload(aps: APS(alert: .fields(Alert(title: "Game Request", subtitle: "Five Card Draw", body: "Bob wants to play poker")),
                             sound: .critical(CriticalSound(volume: 0.5)), category: "GAME_INVITATION")).with("gameID", "12345678").bytes,
            Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8),
            Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"eta":5}}}"#.utf8),
        ]
        for i in 0..<3000 {
            var bytes = seeds[i % seeds.count]
            for _ in 0..<Int.random(in: 1...4, using: &rng) where !bytes.isEmpty {
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes[at] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes.removeSubrange(at...)
                default: bytes.insert(bytes[Int.random(in: 0..<bytes.count, using: &rng)], at: at)
                }
            }
            Self.exerciseEverything(bytes, pushType: i % 2 == 0 ? .alert : .liveactivity)
        }
    }
}
