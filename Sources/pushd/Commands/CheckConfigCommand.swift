/// `pushd check-config [FILE]`: one line per finding, then a summary; exit 1 when any is an error.
enum CheckConfigCommand {
    static func run(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        var check = ConfigCheck(file: parsed.positionals.first ?? CommandContext.defaultConfigPath,
                                environment: context.environment, checkDatabase: !parsed.has("no-database"))
        check.run()
        for finding in check.findings { context.output(finding.description) }
        context.output(check.summary)
        return check.errorCount > 0 ? 1 : 0
    }
}
