import Testing
@testable import pushd

/// Two containers on the host network share a host name and often pid 1: their instance
/// names, which own chunk leases, must still differ.
@Suite struct InstanceNameTests {
    @Test func hostAndPidAreKeptAndSixRandomHexDigitsTellTwoRunsApart() {
        #expect(RunCommand.instanceName(host: "node-7", pid: 1, random: 0xAB) == "node-7/1-0000ab")
        #expect(RunCommand.instanceName(host: "node-7", pid: 1, random: 0xFFFF_FFFF) == "node-7/1-ffffff")
        #expect(RunCommand.instanceName(host: "node-7", pid: 1, random: 1) != RunCommand.instanceName(host: "node-7", pid: 1, random: 2))
    }
}
