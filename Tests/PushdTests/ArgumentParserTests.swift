import Testing
@testable import pushd

@Suite struct ArgumentParserTests {
    static let root = CommandSpec(name: "tool", summary: "a tool", subcommands: [
        CommandSpec(name: "run", summary: "run it", options: [
            .value("config", short: "c", "FILE", "configuration file"),
            .flag("verbose", short: "v", "say more"),
            .value("tag", "TAG", "a tag", repeatable: true),
        ], positionals: [("NAME", "what to run", true), ("EXTRA", "optional", false)]),
        CommandSpec(name: "campaign", summary: "campaigns", subcommands: [
            CommandSpec(name: "start", summary: "start one", positionals: [("ID", "campaign id", true)]),
        ]),
    ])

    @Test func parsesLongShortInlineAndRepeatedOptions() throws {
        let parsed = try ArgumentParser.parse(["run", "--config=a.yml", "-v", "--tag", "x", "--tag", "y", "job"], root: Self.root)
        #expect(parsed.path == ["tool", "run"])
        #expect(parsed.value("config") == "a.yml")
        #expect(parsed.has("verbose"))
        #expect(parsed.values["tag"] == ["x", "y"])
        #expect(parsed.positionals == ["job"])
    }

    @Test func doubleDashEndsOptions() throws {
        let parsed = try ArgumentParser.parse(["run", "--", "--not-an-option"], root: Self.root)
        #expect(parsed.positionals == ["--not-an-option"])
    }

    @Test func nestedCommandsAreFollowed() throws {
        let parsed = try ArgumentParser.parse(["campaign", "start", "42"], root: Self.root)
        #expect(parsed.path == ["tool", "campaign", "start"])
        #expect(parsed.positionals == ["42"])
    }

    @Test(arguments: [
        (["nope"], "unknown command 'nope'"),
        (["rn"], "did you mean 'run'?"),
        (["run"], "missing NAME"),
        (["run", "a", "b", "c"], "unexpected argument 'c'"),
        (["run", "--config"], "--config needs a value (FILE)"),
        (["run", "--verbose=yes", "a"], "--verbose takes no value"),
        (["run", "--config", "a", "--config", "b", "x"], "--config is given twice"),
        (["run", "--colour", "x"], "unknown option '--colour'"),
        (["campaign"], "tool campaign needs a command"),
        ([], "tool needs a command"),
    ])
    func wrongCommandLinesExplainThemselves(arguments: [String], expected: String) {
        do {
            _ = try ArgumentParser.parse(arguments, root: Self.root)
            Issue.record("\(arguments) was accepted")
        } catch let error as UsageError {
            #expect(error.message.contains(expected), "\(error.message)")
            #expect(error.usage.hasPrefix("usage: tool"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test func helpListsOptionsAndCommands() {
        #expect(throws: HelpRequest.self) { try ArgumentParser.parse(["run", "--help"], root: Self.root) }
        do {
            _ = try ArgumentParser.parse(["campaign", "-h"], root: Self.root)
        } catch let help as HelpRequest {
            #expect(help.text.contains("usage: tool campaign <command>"))
            #expect(help.text.contains("start  start one"))
        } catch {
            Issue.record("unexpected \(error)")
        }
        let text = ArgumentParser.help(for: Self.root.subcommands[0], path: ["tool", "run"])
        #expect(text.contains("-c, --config FILE"))
        #expect(text.contains("--verbose"))
        #expect(text.contains("usage: tool run [options] NAME [EXTRA]"))
    }
}
