import APNs
import PushdTestSupport
import Testing
@testable import pushd

/// The hold a run of Forbidden answers puts on an environment says the other environment keeps
/// sending only when this instance has credentials for it: a certificate app with one
/// certificate sends nothing meanwhile, and its hold said otherwise.
@Suite(.serialized) struct ForbiddenHoldWordingTests {
    static func why(_ pipeline: Pipeline, environment: PushdConfig.Environment) throws -> String {
        let sender = try #require(pipeline.context.senders["shop"])
        let forbidden = Verdict.dead(status: 403, reason: PipelineContext.forbiddenReasonPrefix + "APNs answered 403 Forbidden")
        for _ in 1..<sender.forbiddenLimit {
            _ = pipeline.context.forbiddenVerdict(forbidden, sender: sender, environment: environment, lane: Lane.transactional.rawValue)
        }
        let verdict = pipeline.context.forbiddenVerdict(forbidden, sender: sender, environment: environment, lane: Lane.transactional.rawValue)
        guard case .hold(.environment, _, let why) = verdict else {
            Issue.record("the run did not hold the environment: \(verdict)")
            return ""
        }
        return why
    }

    @Test func theForbiddenHoldSaysTheOtherEnvironmentKeepsSendingOnlyWhenItCan() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            // A signing key serves both environments.
            var config = harness.config()
            config.forbiddenLimit = 2
            let environment = config.apps[0].environment
            let token = try Self.why(try harness.pipeline(config), environment: environment)
            #expect(token.contains("the other environment keeps sending"), "\(token)")

            // A certificate serves its own environment only.
            let certificates = harness.certificates
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let certificate = try Self.why(try harness.pipeline(config), environment: environment)
            #expect(!certificate.contains("the other environment keeps sending"), "\(certificate)")
            #expect(certificate.contains("this instance has no credentials for"), "\(certificate)")
        }
    }
}
