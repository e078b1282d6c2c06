import QueueStore

/// `pushd tokens prune-stats [--app NAME]`: live tokens and pruned tokens per app, then the
/// pruned ones by APNs reason.
enum TokensCommand {
    static func pruneStats(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let app = parsed.value("app")
        let connection = try context.connect(parsed, config: try context.configIfGiven(parsed), applicationName: "pushd-tokens")
        let counts = try TokenStore().counts(connection, app: app)
        guard !counts.isEmpty else {
            context.output(app.map { "no tokens registered for app '\($0)'" } ?? "no tokens registered")
            return 0
        }
        let table = [["APP", "LIVE", "PRODUCTION", "SANDBOX", "PRUNED", "PRUNED 24H", "LAST PRUNED"]] + counts.map { row in
            [row.app, String(row.live), String(row.liveProduction), String(row.liveSandbox), String(row.pruned),
             String(row.prunedLastDay), TimeText.moment(row.lastPruned)]
        }
        for line in TextTable.render(table) { context.output(line) }
        let reasons = try TokenStore().pruneReasons(connection, app: app)
        guard !reasons.isEmpty else { return 0 }
        context.output("")
        context.output("pruned by reason:")
        let reasonTable = [["APP", "REASON", "TOKENS"]] + reasons.map { [$0.app, $0.reason, String($0.tokens)] }
        for line in TextTable.render(reasonTable) { context.output(line) }
        return 0
    }
}
