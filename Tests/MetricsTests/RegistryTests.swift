import Testing
@testable import Metrics

@Suite struct RegistryTests {
    @Test func registeringATakenNameWithTheSameShapeReturnsTheExistingFamily() throws {
        let registry = MetricRegistry()
        let first = try registry.counter("pushd_x_total", help: "X.", labels: ["app"])
        let second = try registry.counter("pushd_x_total", help: "X, reworded.", labels: ["app"])
        #expect(first === second)
        try first.labels("shop").increment()
        #expect(try second.labels("shop").value == 1)
        #expect(try first.labels("shop") === second.labels("shop"))
    }

    @Test func registeringATakenNameAsAnotherTypeFailsNamingBoth() throws {
        let registry = MetricRegistry()
        _ = try registry.gauge("pushd_depth", help: "D.", labels: ["lane"])
        let error = #expect(throws: MetricError.self) {
            _ = try registry.callbackGauge("pushd_depth", help: "D.", labels: ["lane"])
        }
        #expect(error?.description == "metric pushd_depth is already registered as gauge with labels [lane]; cannot register it again as gauge with labels [lane] computed at scrape time")
        #expect(throws: MetricError.conflictingRegistration(metric: "pushd_depth", existing: "gauge with labels [lane]", requested: "histogram with labels [lane] and buckets [\"1\"]")) {
            _ = try registry.histogram("pushd_depth", help: "D.", labels: ["lane"], buckets: [1])
        }
    }

    @Test func registeringATakenNameWithOtherLabelsOrBucketsFails() throws {
        let registry = MetricRegistry()
        _ = try registry.counter("pushd_y_total", help: "Y.", labels: ["app"])
        #expect(throws: MetricError.conflictingRegistration(metric: "pushd_y_total", existing: "counter with labels [app]", requested: "counter with labels [app, lane]")) {
            _ = try registry.counter("pushd_y_total", help: "Y.", labels: ["app", "lane"])
        }
        _ = try registry.histogram("pushd_h_seconds", help: "H.", buckets: [1, 2])
        #expect(throws: MetricError.self) {
            _ = try registry.histogram("pushd_h_seconds", help: "H.", buckets: [1, 3])
        }
        #expect(try registry.histogram("pushd_h_seconds", help: "H.", buckets: [1, 2, .infinity]).upperBounds == [1, 2])
    }

    @Test func invalidNamesAndLabelsAreRejectedWithTheirName() {
        let registry = MetricRegistry()
        #expect(throws: MetricError.invalidMetricName("pushd-dash")) { _ = try registry.gauge("pushd-dash", help: "x") }
        #expect(throws: MetricError.invalidMetricName("9lives")) { _ = try registry.gauge("9lives", help: "x") }
        #expect(throws: MetricError.invalidMetricName("")) { _ = try registry.gauge("", help: "x") }
        #expect(throws: MetricError.emptyHelp(metric: "pushd_g")) { _ = try registry.gauge("pushd_g", help: "") }
        #expect(throws: MetricError.invalidLabelName(metric: "pushd_g", label: "a:b")) {
            _ = try registry.gauge("pushd_g", help: "x", labels: ["a:b"])
        }
        #expect(throws: MetricError.reservedLabelName(metric: "pushd_g", label: "__name")) {
            _ = try registry.gauge("pushd_g", help: "x", labels: ["__name"])
        }
        #expect(throws: MetricError.reservedLabelName(metric: "pushd_h", label: "le")) {
            _ = try registry.histogram("pushd_h", help: "x", labels: ["le"])
        }
        #expect(throws: MetricError.duplicateLabelName(metric: "pushd_g", label: "app")) {
            _ = try registry.gauge("pushd_g", help: "x", labels: ["app", "app"])
        }
        #expect(registry.names.isEmpty)
    }

    @Test func countersMustEndInTotalAndUnitsMustAppearInTheName() throws {
        let registry = MetricRegistry()
        #expect(throws: MetricError.missingTotalSuffix(metric: "pushd_sent")) { _ = try registry.counter("pushd_sent", help: "x") }
        #expect(throws: MetricError.unitNotInName(metric: "pushd_latency", unit: "seconds")) {
            _ = try registry.histogram("pushd_latency", help: "x", unit: "seconds")
        }
        _ = try registry.counter("pushd_cpu_seconds_total", help: "x", unit: "seconds")
        _ = try registry.gauge("pushd_memory_bytes", help: "x", unit: "bytes")
        #expect(registry.names == ["pushd_cpu_seconds_total", "pushd_memory_bytes"])
    }

    @Test func invalidBucketsAreRejectedSayingWhy() {
        let registry = MetricRegistry()
        #expect(throws: MetricError.invalidBuckets(metric: "pushd_h", detail: "bounds must increase strictly, but 0.5 follows 1")) {
            _ = try registry.histogram("pushd_h", help: "x", buckets: [1, 0.5])
        }
        #expect(throws: MetricError.invalidBuckets(metric: "pushd_h", detail: "no finite upper bound given")) {
            _ = try registry.histogram("pushd_h", help: "x", buckets: [])
        }
        #expect(throws: MetricError.invalidBuckets(metric: "pushd_h", detail: "bound #1 is NaN; only the implicit last bucket may be +Inf")) {
            _ = try registry.histogram("pushd_h", help: "x", buckets: [.nan, 1])
        }
    }

    @Test func bindingTheWrongNumberOfLabelValuesFailsListingTheExpectedLabels() throws {
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_z_total", help: "Z.", labels: ["app", "reason"])
        let error = #expect(throws: MetricError.self) { _ = try family.labels("shop") }
        #expect(error?.description == "metric pushd_z_total: expected values for labels [app, reason], got 1 value(s) [\"shop\"]")
    }

    @Test func defaultBucketsSpanOneMillisecondToTenSeconds() throws {
        let family = try MetricRegistry().histogram("pushd_d_seconds", help: "D.")
        #expect(family.upperBounds.first == 0.001)
        #expect(family.upperBounds.last == 10)
        #expect(HistogramBuckets.exponential(start: 1, factor: 2, count: 4) == [1, 2, 4, 8])
    }
}
