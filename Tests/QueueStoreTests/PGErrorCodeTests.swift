import QueueStore
import Testing

/// Which SQLSTATEs a caller may wait out with what it holds in memory, and which may mean
/// that what it asked was wrong.
@Suite struct PGErrorCodeTests {
    @Test func errorsOfTheServersMomentAreTransientAndErrorsOfWhatWasAskedAreNot() {
        let transient = ["08006", "08001", "57P01", "57P02", "57P03", "25006", "25P02", "40001", "40P01",
                         "53100", "53200", "53300", "55P03", "55006", "57014", "58030",
                         PGError.Code.connectionFailure.raw, PGError.Code.connectionClosed.raw]
        for raw in transient {
            #expect(PGError.Code(raw).isTransient, "\(raw)")
        }
        let lasting = ["23505", "23514", "23502", "22P02", "22003", "42601", "42P01", "42883", "P0001", "P0002",
                       "XX000", "XX001", "54000", "0A000",
                       PGError.Code.clientEncoding.raw]
        for raw in lasting {
            #expect(!PGError.Code(raw).isTransient, "\(raw)")
        }
    }
}
