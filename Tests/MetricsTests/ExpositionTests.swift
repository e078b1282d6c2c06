import Testing
@testable import Metrics

@Suite struct ExpositionTests {
    @Test func counterFamilyWritesHelpAndTypeOnceThenSortedSeries() throws {
        let registry = MetricRegistry()
        let sent = try registry.counter("pushd_test_sent_total", help: "Sent.", labels: ["app", "lane"])
        try sent.labels("shop", "transactional").increment(by: 3)
        try sent.labels("blog", "campaign").increment()
        try sent.labels("blog", "campaign").increment()

        #expect(registry.expositionText() == """
            # HELP pushd_test_sent_total Sent.
            # TYPE pushd_test_sent_total counter
            pushd_test_sent_total{app="blog",lane="campaign"} 2
            pushd_test_sent_total{app="shop",lane="transactional"} 3

            """)
    }

    @Test func familiesAreWrittenInNameOrderWhateverTheRegistrationOrder() throws {
        let registry = MetricRegistry()
        _ = try registry.gauge("pushd_b", help: "B.")
        _ = try registry.counter("pushd_a_total", help: "A.")
        _ = try registry.gauge("pushd_c", help: "C.")

        #expect(registry.expositionText() == """
            # HELP pushd_a_total A.
            # TYPE pushd_a_total counter
            pushd_a_total 0
            # HELP pushd_b B.
            # TYPE pushd_b gauge
            pushd_b 0
            # HELP pushd_c C.
            # TYPE pushd_c gauge
            pushd_c 0

            """)
    }

    @Test func hostileLabelValuesAreEscapedAndHelpTextToo() throws {
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_hostile_total", help: "Back\\slash and\nnewline \"quotes\" stay.", labels: ["reason"])
        try family.labels("a\\b\"c\nd} x=\"y\",{").increment()
        try family.labels("ünïcødé ✓").increment()

        #expect(registry.expositionText() == #"""
            # HELP pushd_hostile_total Back\\slash and\nnewline "quotes" stay.
            # TYPE pushd_hostile_total counter
            pushd_hostile_total{reason="a\\b\"c\nd} x=\"y\",{"} 1
            pushd_hostile_total{reason="ünïcødé ✓"} 1

            """#)
    }

    @Test func histogramWritesCumulativeBucketsInfSumAndCount() throws {
        let registry = MetricRegistry()
        let family = try registry.histogram("pushd_test_duration_seconds", help: "Duration.", unit: "seconds",
                                            labels: ["app"], buckets: [0.25, 1, 4])
        let shop = try family.labels("shop")
        // A value equal to a bound belongs to that bound's bucket.
        for value in [0.125, 0.25, 0.5, 1, 1, 7.25] { shop.observe(value) }
        _ = try family.labels("blog")

        #expect(registry.expositionText() == """
            # HELP pushd_test_duration_seconds Duration.
            # TYPE pushd_test_duration_seconds histogram
            pushd_test_duration_seconds_bucket{app="blog",le="0.25"} 0
            pushd_test_duration_seconds_bucket{app="blog",le="1"} 0
            pushd_test_duration_seconds_bucket{app="blog",le="4"} 0
            pushd_test_duration_seconds_bucket{app="blog",le="+Inf"} 0
            pushd_test_duration_seconds_sum{app="blog"} 0
            pushd_test_duration_seconds_count{app="blog"} 0
            pushd_test_duration_seconds_bucket{app="shop",le="0.25"} 2
            pushd_test_duration_seconds_bucket{app="shop",le="1"} 5
            pushd_test_duration_seconds_bucket{app="shop",le="4"} 5
            pushd_test_duration_seconds_bucket{app="shop",le="+Inf"} 6
            pushd_test_duration_seconds_sum{app="shop"} 10.125
            pushd_test_duration_seconds_count{app="shop"} 6

            """)
    }

    @Test func histogramWithoutLabelsHasOnlyTheLeLabelAndIgnoresNaN() throws {
        let registry = MetricRegistry()
        let family = try registry.histogram("pushd_test_size_bytes", help: "Size.", buckets: [10, 100, .infinity])
        let histogram = try family.labels()
        histogram.observe(100)
        histogram.observe(.nan)
        histogram.observe(.infinity)
        histogram.observe(Duration.milliseconds(1500))

        #expect(registry.expositionText() == """
            # HELP pushd_test_size_bytes Size.
            # TYPE pushd_test_size_bytes histogram
            pushd_test_size_bytes_bucket{le="10"} 1
            pushd_test_size_bytes_bucket{le="100"} 2
            pushd_test_size_bytes_bucket{le="+Inf"} 3
            pushd_test_size_bytes_sum +Inf
            pushd_test_size_bytes_count 3

            """)
    }

    @Test func gaugeValuesAreFormattedAsPrometheusParsesThem() throws {
        let registry = MetricRegistry()
        let family = try registry.gauge("pushd_test_value", help: "Value.", labels: ["status"])
        try family.labels("a_integral").set(42)
        try family.labels("b_fraction").set(0.25)
        try family.labels("c_negative").set(-3)
        try family.labels("d_nan").set(.nan)
        try family.labels("e_plus_inf").set(.infinity)
        try family.labels("f_minus_inf").set(-.infinity)
        try family.labels("g_tiny").set(1e-7)
        try family.labels("h_huge").set(2e20)
        let moved = try family.labels("i_moved")
        moved.increment()
        moved.increment()
        moved.add(0.5)
        moved.decrement()

        #expect(registry.expositionText() == """
            # HELP pushd_test_value Value.
            # TYPE pushd_test_value gauge
            pushd_test_value{status="a_integral"} 42
            pushd_test_value{status="b_fraction"} 0.25
            pushd_test_value{status="c_negative"} -3
            pushd_test_value{status="d_nan"} NaN
            pushd_test_value{status="e_plus_inf"} +Inf
            pushd_test_value{status="f_minus_inf"} -Inf
            pushd_test_value{status="g_tiny"} 1e-07
            pushd_test_value{status="h_huge"} 2e+20
            pushd_test_value{status="i_moved"} 1.5

            """)
    }

    @Test func callbackGaugeWritesItsSamplesSortedAndHeaderAloneWithoutSource() throws {
        let registry = MetricRegistry()
        let depth = try registry.callbackGauge("pushd_test_depth", help: "Depth.", labels: ["lane"])
        _ = try registry.callbackGauge("pushd_test_unset", help: "Unset.")
        depth.setSource {
            [MetricSample(labelValues: ["transactional"], value: 12), MetricSample(labelValues: ["campaign"], value: 40_000)]
        }

        #expect(registry.expositionText() == """
            # HELP pushd_test_depth Depth.
            # TYPE pushd_test_depth gauge
            pushd_test_depth{lane="campaign"} 40000
            pushd_test_depth{lane="transactional"} 12
            # HELP pushd_test_unset Unset.
            # TYPE pushd_test_unset gauge

            """)
    }

    @Test func twoScrapesOfTheSameStateAreByteForByteEqual() throws {
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_test_total", help: "T.", labels: ["app", "reason"])
        for app in ["z", "a", "m", "b"] {
            for reason in ["Unregistered", "BadDeviceToken", "TooManyRequests"] {
                try family.labels(app, reason).increment()
            }
        }
        #expect(registry.exposition() == registry.exposition())
    }
}
