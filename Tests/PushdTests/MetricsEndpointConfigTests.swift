import Metrics
import Testing
@testable import pushd

/// `metrics.*` bounds of the `/metrics`, `/healthz` and `/readyz` port: read, checked, named
/// as needing a restart when changed, and handed to the server as given.
@Suite struct MetricsEndpointConfigTests {
    static let base = "database: {url: 'postgresql://h/d'}\napps:\n  - {name: shop, bundle_id: a.b, token: {team_id: ABCDE12345, key_id: KEY1234567, key_file: k}}\n"

    @Test func theDefaultsHoldAndEverySettingIsRead() throws {
        #expect(try ConfigLoader.parse(Self.base, environment: [:]).0.metricsEndpoint
                == PushdConfig.MetricsEndpoint(connectionLimit: 4096, perAddressLimit: 64, requestTimeoutSeconds: 5,
                                               answerTimeoutSeconds: 10, idleTimeoutSeconds: 10))
        let text = Self.base + "metrics:\n  listen: 127.0.0.1:9500\n  connection_limit: 512\n  per_address_limit: 0\n  request_timeout_s: 3\n  answer_timeout_s: 20\n  idle_timeout_s: 4\n"
        let config = try ConfigLoader.parse(text, environment: [:]).0
        #expect(config.metricsEndpoint == PushdConfig.MetricsEndpoint(connectionLimit: 512, perAddressLimit: 0, requestTimeoutSeconds: 3,
                                                                       answerTimeoutSeconds: 20, idleTimeoutSeconds: 4))
        let server = RunCommand.metricsServerConfiguration(config, host: "127.0.0.1", port: 9500)
        #expect(server.connectionLimit == 512)
        #expect(server.perIPConnectionLimit == 0)
        #expect(server.requestTimeoutSeconds == 3)
        #expect(server.answerTimeoutSeconds == 20)
        #expect(server.connectionTimeoutSeconds == 4)
    }

    @Test(arguments: [
        ("metrics: {request_timeout_s: 0}", "metrics.request_timeout_s (line 4): 0 is out of range: expected 1…3600"),
        ("metrics: {answer_timeout_s: 4000}", "metrics.answer_timeout_s (line 4): 4000 is out of range: expected 1…3600"),
        ("metrics: {per_address_limit: -1}", "metrics.per_address_limit (line 4): -1 is out of range: expected 0…65535"),
        ("metrics: {connection_limit: 0}", "metrics.connection_limit (line 4): 0 is out of range: expected 1…65535"),
        ("metrics: {idle_timeout_s: many}", "metrics.idle_timeout_s (line 4): expected a whole number"),
    ])
    func outOfRangeValuesAreRefusedWithTheirPlace(line: String, expected: String) {
        let found = ConfigLoaderTests.problems(Self.base + line + "\n")
        #expect(found.contains { $0.contains(expected) }, "got \(found)")
    }

    @Test func aChangedSettingIsNamedAsNeedingARestart() throws {
        let running = try ConfigLoader.parse(Self.base, environment: [:]).0
        var loaded = running
        loaded.metricsEndpoint.requestTimeoutSeconds = 3
        loaded.metricsEndpoint.perAddressLimit = 8
        #expect(ConfigChanges.needingRestart(running: running, loaded: loaded) == ["metrics.per_address_limit", "metrics.request_timeout_s"])
    }
}
