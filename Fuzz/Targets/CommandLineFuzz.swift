// libFuzzer entry point: the command-line parser over pushd's whole command tree.
// Compiled into pushd's CLI sources by Fuzz/build.sh. Arguments are the input split at NUL bytes.

@_cdecl("LLVMFuzzerTestOneInput")
public func pushdFuzzCommandLine(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let arguments = bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    if let parsed = try? ArgumentParser.parse(arguments, root: Commands.root) {
        _ = parsed.path
    }
    return 0
}
