import APNsMock

print("apns-mock (nghttp2 \(HTTP2Library.version))")
