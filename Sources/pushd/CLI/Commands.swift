/// The command tree of `pushd`: every command, its options and its help text.
enum Commands {
    static let configOption = OptionSpec.value("config", short: "c", "FILE", "configuration file (default: /etc/pushd/pushd.yml)")
    static let databaseOption = OptionSpec.value("database-url", "URL", "PostgreSQL URL (default: $PUSHD_DATABASE_URL, else the configuration's)")

    static let root = CommandSpec(
        name: "pushd",
        summary: "pushd sends Apple push notifications queued in PostgreSQL.",
        subcommands: [
            CommandSpec(name: "run", summary: "run the daemon: claim, send, record, serve /metrics", options: [
                configOption,
                .flag("migrate", "apply pending schema migrations before starting"),
            ]),
            CommandSpec(name: "migrate", summary: "apply pending schema migrations to schema pushd", options: [
                configOption, databaseOption,
            ]),
            CommandSpec(name: "check-config", summary: "validate a configuration, its key and certificate files and the database, sending nothing", options: [
                .flag("no-database", "do not try to reach the database"),
            ], positionals: [("FILE", "the configuration file (default: /etc/pushd/pushd.yml)", false)]),
            CommandSpec(name: "send", summary: "send one notification now and print APNs's answer", options: [
                configOption,
                .value("app", "NAME", "the app (from the configuration) to send as"),
                .value("token", "HEX", "the device token"),
                .value("channel", "ID", "a broadcast channel id instead of a token: one Live Activity update for every subscribed device (with the app's token key or certificate)"),
                .value("alert", "TEXT", "an alert body (builds the payload)"),
                .value("title", "TEXT", "an alert title"),
                .value("badge", "N", "a badge number (0 clears the badge)"),
                .value("sound", "NAME", "a sound name"),
                .value("payload", "JSON", "the whole payload as JSON (instead of --alert …)"),
                .value("payload-file", "FILE", "read the payload from a file ('-' for stdin)"),
                .value("push-type", "TYPE", "apns-push-type (default: alert, or background for content-available)"),
                .value("priority", "N", "apns-priority: 10, 5 or 1"),
                .value("topic", "TOPIC", "apns-topic (default: the app's bundle id plus the push type's suffix)"),
                .value("collapse-id", "ID", "apns-collapse-id"),
                .value("expiration", "EPOCH", "apns-expiration in seconds since the epoch (0: deliver once)"),
                .value("apns-id", "UUID", "apns-id (default: chosen by APNs)"),
                .value("environment", "ENV", "production or sandbox instead of the app's (tokens of development builds are sandbox ones)"),
                .flag("dry-run", "build and check the request, print it, and send nothing"),
            ]),
            CommandSpec(name: "campaign", summary: "create and steer campaigns", subcommands: [
                CommandSpec(name: "create", summary: "create a campaign in draft (prints its id)", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "the app"),
                    .value("name", "NAME", "a name for people"),
                    .value("payload", "JSON", "the payload sent to every target without its own"),
                    .value("payload-file", "FILE", "read the payload from a file ('-' for stdin)"),
                    .value("push-type", "TYPE", "apns-push-type (default: alert)"),
                    .value("priority", "N", "apns-priority: 10, 5 or 1 (default: 10; 5 for background)"),
                    .value("collapse-id", "ID", "apns-collapse-id"),
                    .value("start-at", "TIME", "start time, ISO 8601 with a zone, e.g. 2026-12-01T09:00:00Z (default: when started)"),
                    .value("rate", "N", "at most N notifications per second (default: the app's campaign_rate or campaigns.default_rate with --config; else unlimited)"),
                    .value("environment", "ENV", "production or sandbox: where targets imported from a file go (default: the app's); registered tokens keep their own"),
                ]),
                CommandSpec(name: "import", summary: "add targets: a file of 'token' or 'token,payload' lines, '-' for stdin, or registered tokens", options: [
                    configOption, databaseOption,
                    .flag("from-tokens", "every live token of the campaign's app in pushd.device_tokens"),
                    .value("environment", "ENV", "with --from-tokens: only production or sandbox tokens"),
                ], positionals: [("ID", "the campaign id", true), ("FILE", "the targets file, or - for stdin", false)]),
                CommandSpec(name: "start", summary: "start (or schedule) a campaign", options: [configOption, databaseOption],
                            positionals: [("ID", "the campaign id", true)]),
                CommandSpec(name: "pause", summary: "pause a running campaign", options: [configOption, databaseOption],
                            positionals: [("ID", "the campaign id", true)]),
                CommandSpec(name: "resume", summary: "resume a paused campaign", options: [configOption, databaseOption],
                            positionals: [("ID", "the campaign id", true)]),
                CommandSpec(name: "cancel", summary: "cancel a campaign; its unsent targets are dropped", options: [configOption, databaseOption],
                            positionals: [("ID", "the campaign id", true)]),
                CommandSpec(name: "status", summary: "show a campaign's progress", options: [
                    configOption, databaseOption,
                    .flag("watch", "keep showing progress until the campaign ends"),
                    .value("interval", "SECONDS", "with --watch: time between samples (default: 1 on a terminal, 5 otherwise)"),
                ], positionals: [("ID", "the campaign id", true)]),
                CommandSpec(name: "list", summary: "list campaigns, newest first", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "only this app's campaigns"),
                    .value("status", "STATUS", "only campaigns in this status (draft, scheduled, running, paused, done, cancelled)"),
                    .value("limit", "N", "at most N campaigns (default: 50)"),
                ]),
            ]),
            CommandSpec(name: "channels", summary: "broadcast channels for Live Activities (the running pushd carries requests out)", subcommands: [
                CommandSpec(name: "create", summary: "queue the creation of a channel (prints the request id)", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "the app"),
                    .value("storage", "POLICY", "message storage policy: none or most-recent (default: none)"),
                    .value("environment", "ENV", "production or sandbox (default: the app's)"),
                    .value("wait", "SECONDS", "wait up to SECONDS for APNs's answer and print the channel id"),
                ]),
                CommandSpec(name: "list", summary: "list channels, newest first", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "only this app's channels"),
                    .flag("all", "include deleted channels"),
                ]),
                CommandSpec(name: "delete", summary: "queue the deletion of a channel", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "the app"),
                    .value("environment", "ENV", "production or sandbox (default: the channel's)"),
                    .value("wait", "SECONDS", "wait up to SECONDS for APNs's answer"),
                ], positionals: [("CHANNEL_ID", "the channel id APNs gave", true)]),
                CommandSpec(name: "audit", summary: "compare the app's channels at APNs with pushd.channels; exit 1 when they differ, 2 on errors", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "the app (its token key or certificate asks APNs)"),
                    .value("environment", "ENV", "production or sandbox (default: the app's)"),
                ]),
            ]),
            CommandSpec(name: "tokens", summary: "device tokens", subcommands: [
                CommandSpec(name: "prune-stats", summary: "how many tokens were pruned, by app and reason", options: [
                    configOption, databaseOption,
                    .value("app", "NAME", "only this app"),
                ]),
            ]),
            CommandSpec(name: "status", summary: "show the fleet, the queue, campaigns, dead letters and paused apps; exit 1 when degraded", options: [
                configOption, databaseOption,
                .flag("json", "print the status as JSON"),
                .flag("watch", "show the status again every --interval seconds until interrupted"),
                .value("interval", "SECONDS", "with --watch: time between samples (default: 2)"),
            ]),
            CommandSpec(name: "demo", summary: "run the end-to-end demo against a throwaway database and apns-mock", options: [
                .value("targets", "N", "campaign size (default: 200000)"),
            ]),
            CommandSpec(name: "version", summary: "print the version and the libraries pushd runs on"),
        ])
}
