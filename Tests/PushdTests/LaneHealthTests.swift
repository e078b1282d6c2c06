import Testing
@testable import pushd

@Suite struct LaneHealthTests {
    /// A read-only database (SQLSTATE 25006) is named as such in the lane_stuck line and /readyz.
    @Test func aReadOnlyDatabaseIsNamedInTheStuckLaneCause() {
        #expect(LaneHealth.describe(sqlstate: "25006").hasPrefix("the database is read-only and refuses every write (SQLSTATE 25006"))
        #expect(LaneHealth.describe(sqlstate: "42501") == "each pass fails on the database (SQLSTATE 42501)")
    }
}
