// libFuzzer entry point: the YAML reader and the configuration loader behind `pushd run`
// and `pushd check-config`. Compiled into pushd's Config sources by Fuzz/build.sh.

@_cdecl("LLVMFuzzerTestOneInput")
public func pushdFuzzYAMLConfig(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    _ = try? YAMLLibrary.parse(text)
    _ = try? ConfigLoader.parse(text, file: "fuzz.yml", environment: ["PUSHD_APP_SHOP_KEY_FILE": "/nonexistent"])
    return 0
}
