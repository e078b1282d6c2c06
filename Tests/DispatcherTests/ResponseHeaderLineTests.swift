@testable import Dispatcher
import Testing

/// The response header lines the engine reads without allocating: the status, `apns-id`,
/// `apns-unique-id` (development environment only) and `apns-channel-id`.
@Suite struct ResponseHeaderLineTests {
    static func read<T>(_ line: String, _ reader: (UnsafeRawBufferPointer) -> T) -> T {
        Array(line.utf8).withUnsafeBytes { reader($0) }
    }

    @Test func theUniqueIDOfTheDevelopmentEnvironmentIsRead() {
        let id = "0b1e7f6c-6f0a-4d1e-9c54-4a1c2b3d4e5f"
        for line in ["apns-unique-id: \(id)\r\n", "APNS-Unique-ID:\(id)\r\n", "apns-unique-id:\t\(id)\r\n"] {
            #expect(Self.read(line, ResponseHeaderLine.uniqueID)?.lowercasedString == id, "\(line)")
        }
    }

    @Test func theUniqueIDIsNotTakenForTheApnsIDOrTheOtherWayRound() {
        let id = "0b1e7f6c-6f0a-4d1e-9c54-4a1c2b3d4e5f"
        #expect(Self.read("apns-unique-id: \(id)\r\n", ResponseHeaderLine.apnsID) == nil)
        #expect(Self.read("apns-id: \(id)\r\n", ResponseHeaderLine.uniqueID) == nil)
        #expect(Self.read("apns-id: \(id)\r\n", ResponseHeaderLine.apnsID)?.lowercasedString == id)
    }

    @Test func aShortOrMalformedUniqueIDIsIgnored() {
        #expect(Self.read("apns-unique-id: 0b1e7f6c\r\n", ResponseHeaderLine.uniqueID) == nil)
        #expect(Self.read("apns-unique-id: zzzzzzzz-6f0a-4d1e-9c54-4a1c2b3d4e5f\r\n", ResponseHeaderLine.uniqueID) == nil)
    }

    /// Only lines named apns-… are held against the three names; every line those read passes.
    @Test func onlyApnsLinesPassTheFirstCheck() {
        let id = "0b1e7f6c-6f0a-4d1e-9c54-4a1c2b3d4e5f"
        for line in ["apns-id: \(id)\r\n", "APNS-Unique-ID:\(id)\r\n", "Apns-Channel-Id: dHVuaQ==\r\n"] {
            #expect(Self.read(line, ResponseHeaderLine.isAPNs), "\(line)")
        }
        for line in ["content-length: 0\r\n", "date: Thu, 03 Dec 2026 08:00:00 GMT\r\n", "apns:\r\n", "apnsid: \(id)\r\n", "\r\n"] {
            #expect(!Self.read(line, ResponseHeaderLine.isAPNs), "\(line)")
        }
    }
}
