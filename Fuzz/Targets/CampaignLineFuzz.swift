// libFuzzer entry point: the campaign import line parser, which reads audience files.
// Compiled into its QueueStore source by Fuzz/build.sh. Lines are the input split at newlines.

@_cdecl("LLVMFuzzerTestOneInput")
public func pushdFuzzCampaignLine(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let parser = TargetLineParser(sourceName: "fuzz.txt")
    for (number, line) in bytes.split(separator: 10, omittingEmptySubsequences: false).enumerated() {
        _ = try? parser.parse(line, lineNumber: number + 1)
    }
    return 0
}
