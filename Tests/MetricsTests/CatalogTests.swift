import Foundation
import Testing
@testable import Metrics

@Suite struct CatalogTests {
    @Test func catalogUsesOnlyTheClosedLabelSetAndPushdNames() throws {
        let metrics = try PushdMetrics(version: "1.0.0")
        let families: [(String, [String])] = [
            metrics.notificationsSent, metrics.apnsResponses, metrics.apnsConnectionErrors, metrics.retries,
            metrics.deadLetters, metrics.tokensPruned, metrics.jwtRefreshes, metrics.providerTokensForeign, metrics.jobsClaimed,
            metrics.campaignTargetsProcessed, metrics.databaseErrors,
        ].map { ($0.name, $0.labelNames) } + [
            (metrics.apnsRequestDuration.name, metrics.apnsRequestDuration.labelNames),
            (metrics.apnsStreamsInFlight.name, metrics.apnsStreamsInFlight.labelNames),
            (metrics.apnsConnections.name, metrics.apnsConnections.labelNames),
        ] + [metrics.jwtAge, metrics.queueDepth, metrics.queueOldestAge, metrics.campaigns, metrics.campaignTargetsRemaining]
            .map { ($0.name, $0.labelNames) }
        for (name, labels) in families {
            #expect(name.hasPrefix("pushd_"))
            #expect(Set(labels).isSubset(of: PushdMetrics.allowedLabels), "\(name) has labels \(labels)")
        }
        #expect(metrics.buildInfo.labelNames == ["version"])
    }

    @Test func docsListExactlyTheRegisteredPushdMetrics() throws {
        let docs = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/metrics.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        let section = try #require(text.components(separatedBy: "\n## Catalog\n").dropFirst().first)
            .components(separatedBy: "\n## ")[0]
        // Catalog rows start with the metric name in backticks.
        let documented = Set(section.components(separatedBy: "\n").compactMap { line -> String? in
            guard line.hasPrefix("| `") else { return nil }
            return line.dropFirst(3).split(separator: "`").first.map(String.init)
        })
        let registered = Set(try PushdMetrics(version: "1.0.0").registry.names)
        #expect(documented == registered, "only in docs: \(documented.subtracting(registered).sorted()); only in code: \(registered.subtracting(documented).sorted())")
    }

    @Test func registeringTheCatalogTwiceInOneRegistryReturnsTheSameFamilies() throws {
        let registry = MetricRegistry()
        let first = try PushdMetrics(registry: registry, version: "1.0.0")
        let second = try PushdMetrics(registry: registry, version: "1.0.0")
        #expect(first.notificationsSent === second.notificationsSent)
        first.sent(app: "shop", environment: "production", pushType: "alert", lane: "transactional").increment()
        #expect(second.sent(app: "shop", environment: "production", pushType: "alert", lane: "transactional").value == 1)
    }

    @Test func typedBindersPutValuesUnderTheRightLabels() throws {
        let metrics = try PushdMetrics(version: "1.0.0")
        metrics.retry(app: "shop", lane: "campaign", reason: "TooManyRequests").increment()
        #expect(metrics.registry.expositionText().contains("pushd_retries_total{app=\"shop\",lane=\"campaign\",reason=\"TooManyRequests\"} 1\n"))
    }
}
