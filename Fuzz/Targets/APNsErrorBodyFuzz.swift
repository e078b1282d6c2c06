// libFuzzer entry point: the parser of APNs error bodies, which reads what the network sends.
// Compiled into the APNs module's sources by Fuzz/build.sh.

@_cdecl("LLVMFuzzerTestOneInput")
public func pushdFuzzAPNsErrorBody(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    if let parsed = APNsErrorBody.parse(body), let reason = parsed.reason {
        _ = "\(reason)"
    }
    return 0
}
