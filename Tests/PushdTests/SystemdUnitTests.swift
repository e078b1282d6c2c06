import Foundation
import Testing

/// deploy/systemd/pushd.service passes `systemd-analyze verify`, carries the hardening
/// the security review asked for, and `systemd-analyze security` rates it OK or better.
@Suite struct SystemdUnitTests {
    static let unit = "deploy/systemd/pushd.service"

    /// verify checks that ExecStart's program exists: the unit is verified as installed,
    /// with the path of pushd replaced by the binary this build made, in a scratch folder.
    @Test func unitPassesSystemdAnalyzeVerifyWithoutWarnings() throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("pushd").path
        let text = try String(contentsOfFile: DeployTool.path(Self.unit), encoding: .utf8)
        #expect(text.contains("/usr/local/bin/pushd"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushd-unit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let installed = directory.appendingPathComponent("pushd.service").path
        try text.replacingOccurrences(of: "/usr/local/bin/pushd", with: binary).write(toFile: installed, atomically: true, encoding: .utf8)
        let result = try DeployTool.run("/usr/bin/systemd-analyze", ["verify", installed])
        #expect(result.status == 0, "\(result.errors)")
        // Unknown or misspelt settings are only warnings to verify: none is allowed.
        #expect(result.errors.isEmpty, "\(result.errors)")
    }

    @Test func unitCarriesTheHardeningSettings() throws {
        let settings = try Self.settings()
        let expected: [String: String] = [
            "User": "pushd", "Group": "pushd",
            "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
            "NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "SystemCallArchitectures": "native",
            "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes", "RestrictNamespaces": "yes",
            "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
            "ProtectControlGroups": "yes", "UMask": "0077",
        ]
        for (key, value) in expected {
            #expect(settings[key] == [value], "\(key)=\(value) expected, found \(settings[key] ?? [])")
        }
        #expect(settings["SystemCallFilter"]?.first == "@system-service")
        let families = Set(settings["RestrictAddressFamilies"]?.first?.split(separator: " ").map(String.init) ?? [])
        #expect(families == ["AF_INET", "AF_INET6", "AF_UNIX"])
    }

    /// A PostgreSQL that comes up after pushd must not fail the unit: the start-up check
    /// leaves the database out, and `run` waits for it.
    @Test func startUpCheckDoesNotNeedTheDatabase() throws {
        let settings = try Self.settings()
        let check = try #require(settings["ExecStartPre"]?.first)
        #expect(check.contains("check-config"))
        #expect(check.contains("--no-database"))
    }

    @Test func securityReviewRatesTheUnitOKOrBetter() throws {
        let result = try DeployTool.run("/usr/bin/systemd-analyze", ["security", "--offline=true", "--no-pager", DeployTool.path(Self.unit)])
        #expect(result.status == 0, "\(result.errors)")
        let overall = try #require(result.output.split(separator: "\n").first { $0.contains("Overall exposure level") })
        #expect(["PERFECT", "SAFE", "OK"].contains { overall.contains(" \($0) ") }, "\(overall)")
    }

    /// Every `Key=value` of the unit, values in file order.
    static func settings() throws -> [String: [String]] {
        let text = try String(contentsOfFile: DeployTool.path(unit), encoding: .utf8)
        var settings = [String: [String]]()
        for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.hasPrefix("[") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            settings[String(line[..<equals]), default: []].append(String(line[line.index(after: equals)...]))
        }
        return settings
    }
}
