// libFuzzer entry point: the JSON parser and the payload validator, which read every
// payload an application inserts. Compiled into the APNs module's sources by Fuzz/build.sh.

/// The first byte picks the push type; the rest is the payload.
@_cdecl("LLVMFuzzerTestOneInput")
public func pushdFuzzJSONPayload(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try? JSONValue.parse(bytes)
    guard let selector = bytes.first else { return 0 }
    let types = PushType.allCases
    let pushType = types[Int(selector) % types.count]
    let token = try! DeviceToken(String(repeating: "ab", count: 32))
    let notification = Notification(token: token, topic: "com.example.fuzz" + (pushType.topicSuffix ?? ""),
                                    pushType: pushType, payload: Array(bytes.dropFirst()))
    for mode in AuthenticationMode.allCases {
        _ = NotificationValidator.issues(in: notification, authentication: mode)
    }
    return 0
}
