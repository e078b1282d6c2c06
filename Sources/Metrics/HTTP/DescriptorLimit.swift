#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's open-file limit, which bounds how many connections the endpoint can hold.
///
/// systemd and most shells start a process with a soft limit of 1024 and a far higher hard
/// limit; a few hundred idle sockets on the endpoint plus the APNs and database connections
/// would reach 1024 and make `accept` fail for the scraper and the probes too.
public enum DescriptorLimit {
    /// The current soft and hard limits.
    public static var current: (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (0, 0) }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// Raises the soft limit to at least `wanted` (as far as the hard limit allows) and
    /// returns the soft limit in force afterwards. Never lowers it.
    @discardableResult
    public static func raise(toAtLeast wanted: UInt64) -> UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        let target = min(max(UInt64(limit.rlim_cur), wanted), UInt64(limit.rlim_max))
        if target > UInt64(limit.rlim_cur) {
            limit.rlim_cur = rlim_t(target)
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) != 0 { return current.soft }
        }
        return UInt64(limit.rlim_cur)
    }
}
