import Foundation
import Locking
import Posix
import Testing
@testable import pushd

/// The small replacements for Foundation API that pushd uses (Sources/Posix, Locking's
/// Condition, the CLI's column layout) give what Foundation gave.
@Suite struct PosixHelpersTests {
    @Test func fixedPrintsLikeStringFormat() {
        for value in [0, 0.05, 0.15, 0.25, 1.25, 2.5, 99.95, -3.14159, 1_234_567.891, 1e20, 1e300] {
            for places in 0...2 {
                #expect(value.fixed(places) == String(format: "%.\(places)f", value), "\(value) with \(places) places")
                #expect(value.fixed(places, width: 7) == String(format: "%7.\(places)f", value), "\(value) in 7 characters")
            }
        }
    }

    @Test func zeroPaddedPrintsLikePercentZeroD() {
        for value in [-5, -42, 0, 7, 42, 123] {
            #expect(value.zeroPadded(2) == String(format: "%02d", value))
        }
    }

    @Test func paddedCutsOrFillsLikeNSStringPadding() {
        for (text, width) in [("abc", 5), ("abcdef", 3), ("", 2), ("abc", 3)] {
            #expect(text.padded(to: width) == text.padding(toLength: width, withPad: " ", startingAt: 0))
        }
        #expect("  a b  ".trimmingSpaces() == "a b")
        #expect("   ".trimmingSpaces() == "")
    }

    @Test func conditionWaitGivesUpAfterItsTimeout() {
        let condition = Condition(0)
        let start = Date()
        let result: Int? = condition.wait(timeout: 0.05) { $0 > 0 ? $0 : nil }
        #expect(result == nil)
        #expect(Date().timeIntervalSince(start) >= 0.045)
    }

    @Test func conditionUpdateWakesAWaiterOnAnotherThread() {
        let condition = Condition(0)
        PosixThread.detach(name: "test-updater") {
            PosixThread.sleep(seconds: 0.02)
            condition.update { $0 = 7 }
        }
        let result: Int? = condition.wait(timeout: 10) { $0 > 0 ? $0 : nil }
        #expect(result == 7)
    }
}
