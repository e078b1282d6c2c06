/// The standard process metrics every Prometheus client exposes, read from /proc at
/// scrape time.
public enum ProcessMetrics {
    /// Registers `process_cpu_seconds_total`, `process_resident_memory_bytes`,
    /// `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds` and
    /// `process_start_time_seconds`. Registering twice is harmless.
    public static func register(in registry: MetricRegistry) throws(MetricError) {
        let cpu = try registry.callbackCounter(
            "process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.", unit: "seconds")
        cpu.setValueSource { try ProcSelf.stat().cpuSeconds }

        let resident = try registry.callbackGauge(
            "process_resident_memory_bytes", help: "Resident memory size in bytes.", unit: "bytes")
        resident.setValueSource { try ProcSelf.stat().residentMemoryBytes }

        let virtual = try registry.callbackGauge(
            "process_virtual_memory_bytes", help: "Virtual memory size in bytes.", unit: "bytes")
        virtual.setValueSource { try ProcSelf.stat().virtualMemoryBytes }

        let openFDs = try registry.callbackGauge("process_open_fds", help: "Number of open file descriptors.")
        openFDs.setValueSource { try ProcSelf.openFileDescriptors() }

        let maxFDs = try registry.callbackGauge("process_max_fds", help: "Maximum number of open file descriptors.")
        maxFDs.setValueSource { try ProcSelf.maxFileDescriptors() }

        let start = try registry.callbackGauge(
            "process_start_time_seconds", help: "Start time of the process since unix epoch in seconds.", unit: "seconds")
        let startTime = Result { try ProcSelf.stat().startTimeSeconds }
        start.setValueSource { try startTime.get() }
    }
}
