// swift-tools-version:6.0
import PackageDescription

/// C libraries come from Debian's -dev packages; each shim target wraps the
/// variadic and macro APIs Swift cannot import in prefixed `static inline` functions.
func systemLibrary(_ name: String, pkgConfig: String, apt: [String]) -> Target {
    .systemLibrary(name: name, path: "Sources/\(name)", pkgConfig: pkgConfig, providers: [.apt(apt)])
}

/// The engine's modules (everything DispatcherBench links) and pushd's use the standard library
/// alone for text: without the implicit `_StringProcessing` import a process does not load it and
/// `_RegexParser`, 0.8 MB of the engine's resident memory (docs/dispatcher-measurements.md, Peak
/// RSS in December 2026). pushd also waits without the Swift Dispatch overlay (`Locking.Semaphore`), whose library
/// would load the two again: 1.2 MB of the daemon's (docs/queue.md, Memory of a campaign drain).
let withoutStringProcessing: [SwiftSetting] = [.unsafeFlags(["-Xfrontend", "-disable-implicit-string-processing-module-import"])]
let uncheckedExclusivityInRelease: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "pushd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pushd", targets: ["pushd"]),
        .executable(name: "apns-mock", targets: ["apns-mock"]),
        .executable(name: "DispatcherBench", targets: ["DispatcherBench"]),
        .library(name: "APNs", targets: ["APNs"]),
        .library(name: "QueueStore", targets: ["QueueStore"]),
        .library(name: "Metrics", targets: ["Metrics"]),
    ],
    targets: [
        // No pkgConfig: libcurl 8's .pc file passes -isystem flags of its private
        // dependencies, which SwiftPM refuses with a warning; curl.h sits on the default
        // include path and the module map links libcurl.
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        systemLibrary("COpenSSL", pkgConfig: "openssl", apt: ["libssl-dev"]),
        systemLibrary("CLibPQ", pkgConfig: "libpq", apt: ["libpq-dev"]),
        systemLibrary("CNghttp2", pkgConfig: "libnghttp2", apt: ["libnghttp2-dev"]),
        systemLibrary("CMicroHTTPD", pkgConfig: "libmicrohttpd", apt: ["libmicrohttpd-dev"]),
        systemLibrary("CYAML", pkgConfig: "yaml-0.1", apt: ["libyaml-dev"]),

        // Shared state behind a pthread mutex, which ThreadSanitizer understands (Sources/Locking).
        .target(name: "Locking", swiftSettings: withoutStringProcessing),
        // Threads and standard streams on POSIX, so that no target needs Foundation.
        .target(name: "Posix", swiftSettings: withoutStringProcessing),
        // Child processes through posix_spawn; CSpawn reaches the file actions glibc declares for _GNU_SOURCE only.
        .target(name: "CSpawn"),
        .target(name: "Spawn", dependencies: ["CSpawn", "Posix"], swiftSettings: withoutStringProcessing),
        .target(name: "APNs", dependencies: ["COpenSSL", "Locking", "Posix"], swiftSettings: withoutStringProcessing),
        .target(name: "QueueStore", dependencies: ["CLibPQ", "Locking", "Posix"], swiftSettings: withoutStringProcessing),
        .target(name: "Metrics", dependencies: ["CMicroHTTPD", "Locking", "Posix"], swiftSettings: withoutStringProcessing),
        .target(name: "CEpoll"),
        .target(name: "CSignal"),
        .target(name: "CTLSWatch", linkerSettings: [.linkedLibrary("ssl")]),
        // Release builds of the event loop and the engine skip Swift's run-time exclusivity
        // checks too: about 1,000 of the engine's instructions per request, its largest item in
        // the Swift runtime (docs/dispatcher-measurements.md, 2026-12-03); debug builds and tests keep them.
        .target(name: "Polling", dependencies: ["CEpoll", "Locking"], swiftSettings: withoutStringProcessing + uncheckedExclusivityInRelease),
        .target(name: "Dispatcher", dependencies: ["APNs", "Polling", "CCurl", "CTLSWatch", "Locking", "Posix"],
                swiftSettings: withoutStringProcessing + uncheckedExclusivityInRelease),
        // Release builds of the mock skip Swift's run-time exclusivity checks, ~8% of its
        // instructions per request (docs/apns-mock.md); debug builds and tests keep them.
        .target(name: "APNsMock", dependencies: ["APNs", "Polling", "CNghttp2", "COpenSSL", "Locking", "Posix", "Spawn"],
                swiftSettings: withoutStringProcessing + uncheckedExclusivityInRelease),
        .executableTarget(name: "apns-mock", dependencies: ["APNsMock", "Posix"]),
        .executableTarget(name: "pushd", dependencies: ["APNs", "APNsMock", "Dispatcher", "Polling", "QueueStore", "Metrics", "CYAML", "COpenSSL", "Locking", "Posix", "Spawn", "CSignal"], swiftSettings: withoutStringProcessing),
        .executableTarget(name: "QueueBench", dependencies: ["QueueStore"], path: "Benchmarks/QueueBench"),
        .executableTarget(name: "MockBench", dependencies: ["APNsMock", "APNs"], path: "Benchmarks/MockBench"),

        .testTarget(name: "ShimTests", dependencies: ["CCurl", "COpenSSL", "CLibPQ", "CNghttp2", "CMicroHTTPD", "CYAML"]),
        .target(name: "PushdTestSupport", dependencies: ["QueueStore", "Locking", "Spawn"], path: "Tests/Support"),
        .testTarget(name: "QueueStoreTests", dependencies: ["QueueStore", "PushdTestSupport", "Locking"]),
        .testTarget(name: "PushdTests", dependencies: ["pushd", "PushdTestSupport", "APNsMock", "Locking", "Spawn"]),
        .testTarget(name: "DaemonTests", dependencies: ["pushd", "APNs", "APNsMock", "QueueStore", "Metrics", "PushdTestSupport"]),
        .testTarget(name: "DispatcherTests", dependencies: ["Dispatcher", "Polling", "APNs", "APNsMock", "Locking", "Spawn"]),
        .executableTarget(name: "DispatcherBench", dependencies: ["Dispatcher"], path: "Benchmarks/DispatcherBench",
                          swiftSettings: withoutStringProcessing),
        .testTarget(name: "APNsTests", dependencies: ["APNs", "PushdTestSupport"]),
        .testTarget(name: "MetricsTests", dependencies: ["Metrics", "Locking", "PushdTestSupport"]),
        .executableTarget(name: "MetricsBench", dependencies: ["Metrics", "Locking"], path: "Benchmarks/MetricsBench"),
        .executableTarget(name: "APNsBench", dependencies: ["APNs"], path: "Benchmarks/APNsBench"),
        .testTarget(name: "APNsMockTests", dependencies: ["APNsMock", "APNs", "CCurl", "PushdTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
