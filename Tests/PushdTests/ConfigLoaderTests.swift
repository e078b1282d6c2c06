import Testing
@testable import pushd

@Suite struct ConfigLoaderTests {
    static let valid = """
    database:
      url: postgresql://pushd@127.0.0.1:5432/pushd
    metrics:
      listen: 127.0.0.1:9500
    log:
      level: debug
    apns:
      host: 127.0.0.1:8443
      ca_file: /tmp/ca.pem
      threads: 2
      forbidden_limit: 4
      max_in_flight: 2_000
      ping_interval_ms: 30000
      ping_timeout_ms: 5000
    retry:
      max_attempts: 5
      outage_limit_s: 7200
      outage_probe_ms: 2500
    queue:
      dedupe_retention_hours: 48
    tokens:
      not_for_topic_limit: 40
      bad_device_token_limit: 30
    apps:
      - name: shop
        bundle_id: com.example.shop
        environment: sandbox
        token:
          team_id: ABCDE12345
          key_id: KEY1234567
          key_file: /etc/pushd/shop.p8
      - name: legacy
        bundle_id: com.example.legacy
        certificate:
          p12_file: /etc/pushd/legacy.p12
          p12_password: from-file
    """

    @Test func readsEveryKindOfSetting() throws {
        let (config, warnings) = try ConfigLoader.parse(Self.valid, environment: [:])
        #expect(warnings.isEmpty)
        #expect(config.databaseURL == "postgresql://pushd@127.0.0.1:5432/pushd")
        #expect(config.metricsListen == "127.0.0.1:9500")
        #expect(config.logLevel == .debug)
        #expect(config.apns.hostOverride == "127.0.0.1:8443")
        #expect(config.apns.maxInFlight == 2000)
        #expect(config.apns.maxConnectionsPerApp == 8)
        #expect(config.apns.connectionGrowthJudgedOverMilliseconds == 1000)
        #expect(config.apns.pingIntervalMilliseconds == 30_000)
        #expect(config.apns.pingTimeoutMilliseconds == 5000)
        #expect(config.retry.maxAttempts == 5)
        #expect(config.retry.outageLimitSeconds == 7200)
        #expect(config.retry.outageProbeMilliseconds == 2500)
        #expect(config.dedupeRetentionHours == 48)
        #expect(config.notForTopicLimit == 40)
        #expect(config.badDeviceTokenLimit == 30)
        #expect(config.forbiddenLimit == 4)
        #expect(config.apps.count == 2)
        #expect(config.apps[0] == PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox,
                                                   credentials: .token(teamID: "ABCDE12345", keyID: "KEY1234567", keyFile: "/etc/pushd/shop.p8"),
                                                   campaignRate: nil))
        #expect(config.apps[1].environment == .production)
        #expect(config.apps[1].credentials == .certificate(certificateFile: nil, keyFile: nil, pkcs12File: "/etc/pushd/legacy.p12", password: "from-file"))
    }

    @Test func idleCloseTimesArePerLaneAndTheTransactionalLaneKeepsItsConnectionsByDefault() throws {
        let (defaults, _) = try ConfigLoader.parse(Self.valid, environment: [:])
        #expect(defaults.apns.idleCloseSeconds == 600)
        #expect(defaults.apns.transactionalIdleCloseSeconds == 0)
        let text = Self.valid.replacingOccurrences(of: "  ping_timeout_ms: 5000\n",
                                                   with: "  ping_timeout_ms: 5000\n  idle_close_s: 120\n  transactional_idle_close_s: 3600\n")
        let (config, warnings) = try ConfigLoader.parse(text, environment: [:])
        #expect(warnings.isEmpty)
        #expect(config.apns.idleCloseSeconds == 120)
        #expect(config.apns.transactionalIdleCloseSeconds == 3600)
    }

    @Test func environmentOverridesDatabaseURLAndSecrets() throws {
        let (config, _) = try ConfigLoader.parse(Self.valid, environment: [
            "PUSHD_DATABASE_URL": "postgresql://other@db/pushd",
            "PUSHD_APP_LEGACY_P12_PASSWORD": "from-env",
            "PUSHD_APP_SHOP_KEY_FILE": "/run/secrets/shop.p8",
            "PUSHD_LOG_LEVEL": "WARNING",
        ])
        #expect(config.databaseURL == "postgresql://other@db/pushd")
        #expect(config.logLevel == .warning)
        #expect(config.apps[0].credentials == .token(teamID: "ABCDE12345", keyID: "KEY1234567", keyFile: "/run/secrets/shop.p8"))
        #expect(config.apps[1].credentials == .certificate(certificateFile: nil, keyFile: nil, pkcs12File: "/etc/pushd/legacy.p12", password: "from-env"))
    }

    /// Two apps whose names give one environment override (`shop`'s sandbox key file is
    /// `shop_sandbox`'s key file; `shop-a` and `shop_a` share every variable) are refused: one
    /// variable would set both apps' secrets.
    @Test(arguments: [("shop", "shop_sandbox", "PUSHD_APP_SHOP_SANDBOX_KEY_FILE"), ("shop-a", "shop_a", "PUSHD_APP_SHOP_A_KEY_FILE"),
                      ("news_production", "news", "PUSHD_APP_NEWS_PRODUCTION_KEY_FILE")])
    func appsWhoseNamesShareAnEnvironmentOverrideAreRefused(first: String, second: String, variable: String) {
        func app(_ name: String) -> String {
            """
              - name: \(name)
                bundle_id: com.example.\(name.filter(\.isLetter))
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: /etc/pushd/\(name).p8

            """
        }
        let text = "database:\n  url: postgresql://pushd@127.0.0.1:5432/pushd\napps:\n" + app(first) + app(second)
        #expect(Self.problems(text).contains { $0.contains("app '\(second)' and app '\(first)' would both read \(variable)") },
                "\(Self.problems(text))")
        let fine = "database:\n  url: postgresql://pushd@127.0.0.1:5432/pushd\napps:\n" + app(first) + app(second + "x")
        #expect(Self.problems(fine).isEmpty, "\(Self.problems(fine))")
    }

    static func problems(_ text: String, environment: [String: String] = [:]) -> [String] {
        do {
            _ = try ConfigLoader.parse(text, environment: environment)
            return []
        } catch let error as ConfigError {
            return error.problems.map(\.description)
        } catch {
            return ["unexpected \(error)"]
        }
    }

    @Test(arguments: [
        ("database: {url: x}\napps: []", "database.url (line 1): expected a postgresql:// URL"),
        ("apps: []", "database.url: missing"),
        ("database: {url: 'postgresql://h/d'}", "apps (line 1): missing: at least one app"),
        ("database: {url: 'postgresql://h/d'}\ndatabse: 1\napps: []", "databse (line 2): unknown setting (did you mean 'database'?)"),
        ("database: [1]\napps: []", "database (line 1): expected a mapping"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: Shop!\n    bundle_id: com.x.y\n    token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}",
         "apps[0].name (line 3): 'Shop!' must be 1 to 64 lower-case letters, digits, '-' or '_', starting with a letter or digit"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: nodots\n    token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}",
         "'nodots' is not a bundle id"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: com.example.my_app\n    token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}",
         "apps[0].bundle_id (line 3): 'com.example.my_app' is not a bundle id like com.example.app (letters, digits, '-' and '.', at least two parts)"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: com.example.shop.voip\n    token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}",
         "apps[0].bundle_id (line 3): 'com.example.shop.voip' ends in '.voip', the topic suffix of voip pushes"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b\n    token: {team_id: short, key_id: KEY1234567, key_file: k}",
         "apps[0].token.team_id (line 5): 'short' must be exactly 10 characters"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b\n    token: {team_id: ABCDE12345, key_id: key1234567, key_file: k}",
         "apps[0].token.key_id (line 5): 'key1234567' must be exactly 10 characters of A–Z"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b\n    token: {team_id: ABCDE12345, key_id: KEY1234567}",
         "apps[0].token.key_file (line 5): missing: path of the .p8 signing key"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b",
         "apps[0] (line 3): missing credentials"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b\n    environment: staging\n    token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}",
         "'staging' is not one of: production, sandbox"),
        ("database: {url: 'postgresql://h/d'}\napns: {threads: 0}\napps: []", "apns.threads (line 2): 0 is out of range: expected 1…64"),
        ("database: {url: 'postgresql://h/d'}\napns: {threads: many}\napps: []", "apns.threads (line 2): expected a whole number"),
        ("database: {url: 'postgresql://h/d'}\napns: {ping_timeout_ms: 0}\napps: []", "apns.ping_timeout_ms (line 2): 0 is out of range: expected 100…600000"),
        ("database: {url: 'postgresql://h/d'}\napns: {idle_close_s: 0}\napps: []", "apns.idle_close_s (line 2): 0 is out of range: expected 1…86400"),
        ("database: {url: 'postgresql://h/d'}\napns: {transactional_idle_close_s: -1}\napps: []",
         "apns.transactional_idle_close_s (line 2): -1 is out of range: expected 0…86400"),
        ("database: {url: 'postgresql://h/d'}\napns: {threads: 4, connections_per_app: 2, max_connections_per_app: 6}\napps: []",
         "apns.max_connections_per_app (line 2): 6 is below apns.threads × apns.connections_per_app (8)"),
        ("database: {url: 'postgresql://h/d'}\napns: {connection_growth_judged_ms: -1}\napps: []",
         "apns.connection_growth_judged_ms (line 2): -1 is out of range: expected 0…60000"),
        ("database: {url: 'postgresql://h/d'}\napns: {max_connections_per_app: 5000}\napps: []",
         "apns.max_connections_per_app (line 2): 5000 is out of range: expected 1…1024"),
        ("database: {url: 'postgresql://h/d'}\napns: {threads: 4, max_in_flight: 2}\napps: []",
         "apns.max_in_flight (line 2): 2 is below apns.threads (4)"),
        ("database: {url: 'postgresql://h/d'}\nmetrics: {listen: nowhere}\napps: []", "metrics.listen (line 2): 'nowhere' is not host:port"),
        ("database: {url: 'postgresql://h/d'}\ncampaigns: {answer_coalescing_ms: 200}\napps: []",
         "campaigns.answer_coalescing_ms (line 2): 200 is out of range: expected 0…50"),
        ("database: {url: 'postgresql://h/d'}\nretry: {base_delay_ms: 5000, max_delay_ms: 10}\napps: []", "retry.max_delay_ms (line 2): must not be smaller"),
        ("database: {url: 'postgresql://h/d'}\nretry: {outage_probe_ms: 100}\napps: []",
         "retry.outage_probe_ms (line 2): 100 is out of range: expected 500…300000"),
        ("database: {url: 'postgresql://h/d'}\nqueue: {dedupe_retention_hours: 0}\napps: []",
         "queue.dedupe_retention_hours (line 2): 0 is out of range: expected 1…8760"),
        ("database: {url: 'postgresql://h/d'}\ntokens: {not_for_topic_limit: 0}\napps: []",
         "tokens.not_for_topic_limit (line 2): 0 is out of range: expected 1…100000"),
        ("database: {url: 'postgresql://h/d'}\ntokens: {bad_device_token_limit: 0}\napps: []",
         "tokens.bad_device_token_limit (line 2): 0 is out of range: expected 1…100000"),
        ("database: {url: 'postgresql://h/d'}\napns: {forbidden_limit: 0}\napps: []",
         "apns.forbidden_limit (line 2): 0 is out of range: expected 1…100000"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - name: s\n    bundle_id: a.b\n    certificate: {cert_file: c.pem, p12_file: c.p12}",
         "set either cert_file or p12_file, not both"),
        ("database: {url: 'postgresql://h/d'}\napps:\n  - {name: s, bundle_id: a.b, certificate: {p12_file: p}}\n  - {name: s, bundle_id: a.c, certificate: {p12_file: p}}",
         "app 's' is defined twice"),
        ("database:\n  url: [unclosed", "not valid YAML"),
        ("a: 1\na: 2", "key 'a' appears twice"),
    ])
    func eachKindOfMistakeIsNamedWithItsPlace(text: String, expected: String) {
        let found = Self.problems(text)
        #expect(found.contains { $0.contains(expected) }, "got \(found)")
    }

    /// `apns.host`, `apns.sandbox_host` and `apns.channel_host` are refused at load when the
    /// dispatcher could not use them, naming the setting and its line: a bad port, an IPv6
    /// address without brackets, a scheme. Before, a bad port made the whole text the host name.
    @Test(arguments: [
        ("host", "push.example:abc", "apns.host (line 3): 'push.example:abc' is not host or host:port (the port 'abc' is not a number from 1 to 65535)"),
        ("sandbox_host", "127.0.0.1:70000", "apns.sandbox_host (line 3): '127.0.0.1:70000' is not host or host:port (the port '70000' is not a number from 1 to 65535)"),
        ("channel_host", "::1:2196", "apns.channel_host (line 3): '::1:2196' is not host or host:port (an IPv6 address goes in brackets, as [::1]:2197)"),
        ("channel_host", "https://mock:2196", "apns.channel_host (line 3): 'https://mock:2196' is not host or host:port (a host has no scheme or path)"),
        ("host", "[::1]x", "apns.host (line 3): '[::1]x' is not host or host:port (after ']' only ':port' may follow)"),
        ("host", "mock:", "apns.host (line 3): 'mock:' is not host or host:port (the port '' is not a number from 1 to 65535)"),
    ])
    func aHostOverrideTheDispatcherCannotUseIsRefusedAtLoadNamingTheSettingAndLine(key: String, value: String, expected: String) {
        let text = "database: {url: 'postgresql://h/d'}\napns:\n  \(key): '\(value)'\napps: []"
        let found = Self.problems(text)
        #expect(found.contains { $0.contains(expected) }, "got \(found)")
    }

    @Test(arguments: ["push.example", "push.example:2197", "127.0.0.1:8443", "[::1]", "[::1]:2197"])
    func aHostOverrideWithOrWithoutPortIsAccepted(value: String) {
        for key in ["host", "sandbox_host", "channel_host"] {
            let text = "database: {url: 'postgresql://h/d'}\napns:\n  \(key): '\(value)'\napps: []"
            let found = Self.problems(text)
            #expect(!found.contains { $0.contains("apns.\(key)") }, "\(key): got \(found)")
        }
    }

    /// `apns.host` replaces both environments' hosts (for apns-mock). Naming one of Apple's
    /// hosts there sends the other environment's notifications to it: APNs answers
    /// BadDeviceToken to each, and pushd pruned every token of that environment. Refused at
    /// load, naming the setting, its line and the fix; Apple's production host with a
    /// sandbox_host of its own, and anything not Apple's, stay accepted.
    @Test(arguments: [
        ("  host: api.push.apple.com", "apns.host (line 3): 'api.push.apple.com' is Apple's production host, and apns.host replaces the sandbox host too"),
        ("  host: API.Push.Apple.com.:2197", "apns.host (line 3): 'API.Push.Apple.com.:2197' is Apple's production host"),
        ("  host: api.sandbox.push.apple.com\n  sandbox_host: api.sandbox.push.apple.com", "apns.host (line 3): 'api.sandbox.push.apple.com' is Apple's sandbox host, and apns.host replaces the production host too"),
        ("  host: api.development.push.apple.com", "is Apple's sandbox host"),
        ("  sandbox_host: api.push.apple.com:443", "apns.sandbox_host (line 3): 'api.push.apple.com:443' is Apple's production host: sandbox notifications would go to it"),
    ])
    func anAppleHostThatWouldCarryTheOtherEnvironmentIsRefused(lines: String, expected: String) {
        let text = "database: {url: 'postgresql://h/d'}\napns:\n\(lines)\napps: []"
        let found = Self.problems(text)
        #expect(found.contains { $0.contains(expected) && $0.contains("BadDeviceToken") && $0.contains("Apple's hosts are the default") },
                "got \(found)")
    }

    @Test(arguments: ["  host: api.push.apple.com\n  sandbox_host: api.sandbox.push.apple.com", "  sandbox_host: api.sandbox.push.apple.com",
                      "  host: push.apple.com.example:2197", "  host: 127.0.0.1:2197"])
    func appleHostsServingTheirOwnEnvironmentAreAccepted(lines: String) {
        let text = "database: {url: 'postgresql://h/d'}\napns:\n\(lines)\napps: []"
        let found = Self.problems(text)
        #expect(!found.contains { $0.contains("apns.host") || $0.contains("apns.sandbox_host") }, "got \(found)")
    }

    /// A host override that reached the dispatcher without the loader (a configuration built
    /// in code) is refused there with the same words, rather than sent to a host named
    /// "push.example:abc".
    @Test func theDispatcherConfigurationRefusesABadHostOverrideNamingTheSetting() throws {
        var (config, _) = try ConfigLoader.parse(Self.valid, environment: [:])
        config.apns.sandboxHostOverride = "push.example:abc"
        #expect {
            _ = try Pipeline.dispatcherConfiguration(for: config.apps[0], environment: .sandbox, config: config)
        } throws: { error in
            "\(error)".contains("apns.sandbox_host: 'push.example:abc' is not host or host:port")
        }
        config.apns.sandboxHostOverride = "[::1]"
        let v6 = try #require(try Pipeline.dispatcherConfiguration(for: config.apps[0], environment: .sandbox, config: config))
        #expect(v6.host == "::1" && v6.port == 443, "\(v6.host) \(v6.port)")
    }

    /// `metrics.listen` is read by the parse the host overrides use (`HostPort`), with the
    /// port required and 0 allowed (any free port): refused at load, naming the setting and
    /// its line. Before, a looser parse took the text after the last ':' as the port, so an
    /// IPv6 literal without brackets, a scheme, an '@', a '+' before the port and an unclosed
    /// bracket were accepted, and a refusal named the section's line.
    @Test(arguments: [
        ("::1:9464", "(an IPv6 address goes in brackets, as [::1]:9464)"),
        ("[::1:9464", "(the IPv6 address has no closing ']')"),
        ("[127.0.0.1]:9464", "(only an IPv6 address goes in brackets)"),
        ("127.0.0.1:+9464", "(the port '+9464' is not a number from 0 to 65535)"),
        ("127.0.0.1:65536", "(the port '65536' is not a number from 0 to 65535)"),
        ("127.0.0.1:9464x", "(the port '9464x' is not a number from 0 to 65535)"),
        ("127.0.0.1", "(the port is missing)"),
        (":9464", "(the host is empty)"),
        ("http://127.0.0.1:9464", "(a host has no scheme or path)"),
        ("user@127.0.0.1:9464", "('@' has no place in a host)"),
    ])
    func aMetricsListenAddressTheServerCannotBindIsRefusedNamingTheSettingAndLine(value: String, reason: String) {
        let text = "database: {url: 'postgresql://h/d'}\nlog:\n  level: info\nmetrics:\n  per_address_limit: 8\n  listen: '\(value)'\napps: []"
        let found = Self.problems(text)
        let expected = "metrics.listen (line 6): '\(value)' is not host:port \(reason); for example 127.0.0.1:9464, 0.0.0.0:9464 or [::1]:9464"
        #expect(found.contains { $0.contains(expected) }, "got \(found)")
    }

    /// Port 0 stays: it asks the system for a free port, as the daemon tests start pushd.
    @Test(arguments: ["127.0.0.1:0", "127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464", "localhost:65535"])
    func aMetricsListenAddressWithItsPortIsAccepted(value: String) throws {
        let text = "database: {url: 'postgresql://h/d'}\nmetrics:\n  listen: '\(value)'\napps: []"
        #expect(!Self.problems(text).contains { $0.contains("metrics.listen") }, "\(Self.problems(text))")
        #expect(try ConfigLoader.listenAddress(value).host == (value.hasPrefix("[") ? "::1" : String(value.prefix { $0 != ":" })))
    }

    /// `apns.channel_host` without a port keeps the channel management port of its environment
    /// (Apple: 2195 development, 2196 production; there is no 443 for that API), as
    /// `pushd channel-audit` and the broadcast worker connect. Before, it kept the push port
    /// the configuration had (443), where no channel management API listens.
    @Test(arguments: [(PushdConfig.Environment.sandbox, 2195), (.production, 2196)])
    func aChannelHostWithoutAPortKeepsTheChannelManagementPort(environment: PushdConfig.Environment, port: Int) throws {
        var (config, _) = try ConfigLoader.parse(Self.valid, environment: [:])
        config.apns.hostOverride = nil
        config.apns.channelHostOverride = "mgmt.example"
        let output = CapturedOutput()
        // The key file does not exist: the command stops before any connection, after naming its target.
        #expect(throws: (any Error).self) {
            _ = try ChannelAuditCommand.channelsAtAPNs(app: config.apps[0], environment: environment, config: config, output.context())
        }
        #expect(output.text.hasPrefix("GET https://mgmt.example:\(port)/1/apps/com.example.shop/all-channels"), "\(output.text)")

        config.apns.channelHostOverride = "mgmt.example:8443"
        let named = CapturedOutput()
        #expect(throws: (any Error).self) {
            _ = try ChannelAuditCommand.channelsAtAPNs(app: config.apps[0], environment: environment, config: config, named.context())
        }
        #expect(named.text.hasPrefix("GET https://mgmt.example:8443/"), "\(named.text)")
    }

    @Test func everyProblemIsReportedAtOnce() {
        let found = Self.problems("apns: {threads: 0, colour: red}\napps: [{name: '', bundle_id: x}]")
        #expect(found.count >= 4, "\(found)")
        #expect(found.allSatisfy { $0.hasPrefix("error: ") })
    }

    /// A pause before each read holds the answers, and the streams they free, at far APNs; the
    /// campaign lane reads them at once unless the operator asks for the pause.
    @Test func campaignAnswersAreReadAtOnceByDefault() throws {
        #expect(try ConfigLoader.parse(Self.valid, environment: [:]).0.campaignAnswerCoalescingMilliseconds == 0)
        let paused = Self.valid.replacingOccurrences(of: "retry:\n", with: "campaigns:\n  answer_coalescing_ms: 25\nretry:\n")
        #expect(try ConfigLoader.parse(paused, environment: [:]).0.campaignAnswerCoalescingMilliseconds == 25)
    }

    /// Unset, the window holds every stream the lane may open and one connection's streams per
    /// thread waiting for them: it counts what waits in the engine and what the campaign workers
    /// have not yet taken back, and sized to the streams alone (8 × 500) a thread's last
    /// connection never carried all its streams, so its growth trial was given up.
    @Test func maxInFlightDefaultsToEveryStreamTheLaneMayOpenAndAConnectionPerThreadWaiting() throws {
        let unset = Self.valid.replacingOccurrences(of: "  max_in_flight: 2_000\n", with: "")
        #expect(try ConfigLoader.parse(unset, environment: [:]).0.apns.maxInFlight == (8 + 2) * 500)
        let raised = unset.replacingOccurrences(of: "  threads: 2\n",
                                                with: "  threads: 2\n  max_connections_per_app: 16\n  streams_per_connection: 1000\n")
        #expect(try ConfigLoader.parse(raised, environment: [:]).0.apns.maxInFlight == (16 + 2) * 1000)
        let threads = unset.replacingOccurrences(of: "  threads: 2\n", with: "  threads: 4\n")
        #expect(try ConfigLoader.parse(threads, environment: [:]).0.apns.maxInFlight == (8 + 4) * 500)
        let pinned = Self.valid.replacingOccurrences(of: "  threads: 2\n", with: "  threads: 2\n  max_connections_per_app: 16\n")
        #expect(try ConfigLoader.parse(pinned, environment: [:]).0.apns.maxInFlight == 2000)
    }

    /// A claimed transactional batch stays in its open transaction until every job of it is
    /// answered, and an app's transactional lane has at most `apns.max_in_flight` requests in
    /// flight: claimed jobs beyond that wait for a free slot with the transaction open, and a
    /// slow APNs keeps it open past the idle-in-transaction time-out, which aborts the batch and
    /// sends all of it again.
    @Test func moreClaimedJobsThanTheInFlightWindowIsRefusedNamingTheKeysAndNumbers() {
        let above = Self.problems("database: {url: 'postgresql://h/d'}\napns: {max_in_flight: 1000}\nworkers: {transactional: 4, batch_size: 500}\napps: []")
        #expect(above.contains {
            $0.contains("workers.batch_size (line 3): workers.transactional × workers.batch_size (4 × 500 = 2000) is above apns.max_in_flight (1000)")
        }, "got \(above)")
        #expect(above.contains { $0.contains("at most 250") && $0.contains("idle_in_transaction_session_timeout") }, "got \(above)")
        // Unset, the window is derived from the connections, threads and streams: (2 + 2) × 50 = 200.
        let derived = Self.problems(
            "database: {url: 'postgresql://h/d'}\napns: {max_connections_per_app: 2, streams_per_connection: 50}\nworkers: {transactional: 2, batch_size: 110}\napps: []")
        #expect(derived.contains { $0.contains("(2 × 110 = 220) is above apns.max_in_flight (200)") }, "got \(derived)")
        // Every claimed job has a slot: accepted (the defaults, 4 × 500 within 4,000, and exactly the window).
        let exact = Self.problems("database: {url: 'postgresql://h/d'}\napns: {max_in_flight: 2000}\nworkers: {transactional: 4, batch_size: 500}\napps: []")
        #expect(!exact.contains { $0.contains("workers.batch_size") }, "got \(exact)")
        #expect(!Self.problems("database: {url: 'postgresql://h/d'}\napps: []").contains { $0.contains("workers.batch_size") })
    }

    @Test func theCampaignLanesAdaptiveInFlightLimitIsOffUnlessAskedFor() throws {
        #expect(try !ConfigLoader.parse(Self.valid, environment: [:]).0.campaignAdaptiveInFlight)
        let adaptive = Self.valid.replacingOccurrences(of: "retry:\n", with: "campaigns:\n  adaptive_in_flight: true\nretry:\n")
        #expect(try ConfigLoader.parse(adaptive, environment: [:]).0.campaignAdaptiveInFlight)
    }
}
