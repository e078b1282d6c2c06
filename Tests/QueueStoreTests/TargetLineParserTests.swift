import PushdTestSupport
import QueueStore
import Testing

@Suite struct TargetLineParserTests {
    let parser = TargetLineParser(sourceName: "audience.csv")

    func parse(_ text: String) throws -> TargetLineParser.Line? {
        try parser.parse(Array(text.utf8)[...], lineNumber: 4)
    }

    @Test func tokensAreLowerCasedAndPayloadsFollowACommaOrTab() throws {
        let token = Fixtures.token(0xBEEF)
        #expect(try parse(token.uppercased())?.token == Array(token.utf8))
        #expect(try parse("  \(token) , {\"a\":1} \r")?.payload == Array("{\"a\":1}".utf8))
        #expect(try parse("\(token)\t{\"a\":1}")?.payload == Array("{\"a\":1}".utf8))
        #expect(try parse("\(token),")?.payload == nil)
        #expect(try parse("") == nil)
        #expect(try parse("# comment") == nil)
        #expect(try parse(String(repeating: "ab", count: 100))?.token.count == 200)
    }

    @Test func badLinesNameTheSourceLineAndProblem() {
        func message(_ text: String) -> String? { Fixtures.queueError { _ = try parse(text) }?.message }
        #expect(message(String(repeating: "a", count: 63)) == "audience.csv line 4: the device token must be an even number of hexadecimal digits from 64 to 200, got 63")
        #expect(message(String(repeating: "ab", count: 101)) == "audience.csv line 4: the device token must be an even number of hexadecimal digits from 64 to 200, got 202")
        #expect(message("g" + String(repeating: "a", count: 63)) == "audience.csv line 4: the device token must be hexadecimal, found 'g' at column 1")
        #expect(message(Fixtures.token(1) + ",\"text\"") == "audience.csv line 4: the payload after the token must be a JSON object ({…})")
    }

    @Test func aPayloadTheCheckRefusesNamesTheSourceLineAndWhatTheCheckSays() throws {
        let checked = TargetLineParser(sourceName: "audience.csv") { payload in
            payload.count > 8 ? "the payload is \(payload.count) bytes; at most 8" : nil
        }
        #expect(try checked.parse(Array("\(Fixtures.token(1)),{\"a\":1}".utf8)[...], lineNumber: 9)?.payload == Array("{\"a\":1}".utf8))
        #expect(try checked.parse(Array(Fixtures.token(1).utf8)[...], lineNumber: 9)?.payload == nil)
        let refused = Fixtures.queueError { _ = try checked.parse(Array("\(Fixtures.token(1)),{\"a\":\"long\"}".utf8)[...], lineNumber: 9) }
        #expect(refused?.message == "audience.csv line 9: the payload is 12 bytes; at most 8")
    }
}

@Suite struct CampaignActionTests {
    @Test func everyStatusAllowsExactlyTheDocumentedActions() {
        let expected: [CampaignStatus: Set<CampaignAction>] = [
            .draft: [.start, .cancel],
            .scheduled: [.pause, .cancel],
            .running: [.pause, .cancel],
            .paused: [.resume, .cancel],
            .done: [],
            .cancelled: [],
        ]
        for status in CampaignStatus.allCases {
            let allowed = Set(CampaignAction.allCases.filter { status.allows($0) })
            #expect(allowed == expected[status], "\(status)")
            #expect(status.isFinal == allowed.isEmpty)
        }
    }
}
