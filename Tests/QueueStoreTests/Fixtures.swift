import PushdTestSupport
import Foundation
import QueueStore

enum Fixtures {
    static func token(_ seed: Int) -> String {
        var text = String(seed, radix: 16)
        text = String(repeating: "0", count: max(0, 16 - text.count)) + text
        return String(repeating: text, count: 4)
    }

    static let payload = #"{"aps":{"alert":{"title":"Shipped","body":"Order 1042 is on its way"}}}"#

    /// The error `body` throws as a `PGError`, or nil (recorded as an issue by the caller).
    static func pgError(_ body: () throws -> Void) -> PGError? {
        do {
            try body()
            return nil
        } catch let error as PGError {
            return error
        } catch {
            return PGError(code: .clientEncoding, message: "not a PGError: \(error)")
        }
    }

    static func queueError(_ body: () throws -> Void) -> QueueError? {
        do {
            try body()
            return nil
        } catch let error as QueueError {
            return error
        } catch {
            return QueueError("not a QueueError: \(error)")
        }
    }
}
