import Testing
@testable import Metrics

@Suite struct CallbackFamilyTests {
    struct DatabaseDown: Error, CustomStringConvertible {
        var description: String { "connection refused" }
    }

    @Test func sourceIsCalledOnceWhileItsResultIsCached() throws {
        let registry = MetricRegistry()
        let depth = try registry.callbackGauge("pushd_cached_depth", help: "D.", labels: ["lane"])
        let calls = Tally()
        depth.setSource(cacheFor: .seconds(600)) {
            [MetricSample(labelValues: ["transactional"], value: Double(calls.next()))]
        }
        for _ in 0..<5 { _ = registry.exposition() }
        #expect(calls.value == 1)
        #expect(depth.samples() == [MetricSample(labelValues: ["transactional"], value: 1)])
    }

    @Test func sourceIsCalledAgainOnceTheCacheIsStale() throws {
        let registry = MetricRegistry()
        let depth = try registry.callbackGauge("pushd_uncached_depth", help: "D.")
        let calls = Tally()
        depth.setValueSource { Double(calls.next()) }
        _ = depth.samples()
        #expect(depth.samples() == [MetricSample(value: 2)])
    }

    @Test func failingSourceShowsNoSamplesAndKeepsTheErrorForTheLog() throws {
        let registry = MetricRegistry()
        let depth = try registry.callbackGauge("pushd_failing_depth", help: "D.", labels: ["lane"])
        depth.setSource { throw DatabaseDown() }
        #expect(registry.expositionText() == """
            # HELP pushd_failing_depth D.
            # TYPE pushd_failing_depth gauge

            """)
        #expect(depth.lastError == "metric pushd_failing_depth: source failed: connection refused")
    }

    @Test func samplesWithTheWrongLabelCountOrRepeatedLabelsAreDropped() throws {
        let registry = MetricRegistry()
        let depth = try registry.callbackGauge("pushd_odd_depth", help: "D.", labels: ["lane"])
        depth.setSource {
            [MetricSample(labelValues: ["campaign"], value: 1),
             MetricSample(labelValues: [], value: 2),
             MetricSample(labelValues: ["campaign"], value: 3)]
        }
        #expect(registry.expositionText() == """
            # HELP pushd_odd_depth D.
            # TYPE pushd_odd_depth gauge
            pushd_odd_depth{lane="campaign"} 1

            """)
        #expect(depth.lastError == "metric pushd_odd_depth: expected values for labels [lane], got 0 value(s) []")
    }
}
