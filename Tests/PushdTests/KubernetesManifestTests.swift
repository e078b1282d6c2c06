import Foundation
import Testing
@testable import pushd

/// deploy/kubernetes/pushd.yaml, every document parsed, checked for what running pushd
/// on Kubernetes needs: probes, a drain that the grace period does not cut short, the
/// migration Job, a disruption budget, a scrape object, least privilege and a
/// NetworkPolicy that lets only Prometheus reach the metrics port.
@Suite struct KubernetesManifestTests {
    static let manifest = "deploy/kubernetes/pushd.yaml"

    typealias Object = [String: Any]

    static func objects() throws -> [Object] {
        try DeployTool.yamlDocuments(manifest).compactMap { $0 as? Object }
    }

    static func object(kind: String, in objects: [Object]) throws -> Object {
        try #require(objects.first { $0["kind"] as? String == kind }, "\(manifest) has no \(kind)")
    }

    static func podSpec(_ workload: Object) throws -> Object {
        let spec = try #require(workload["spec"] as? Object)
        let template = try #require(spec["template"] as? Object)
        return try #require(template["spec"] as? Object)
    }

    static func containers(_ podSpec: Object) throws -> [Object] {
        try #require(podSpec["containers"] as? [Object])
    }

    /// The configuration the ConfigMap ships, read by pushd's own loader.
    static func shippedConfig(_ objects: [Object]) throws -> PushdConfig {
        let map = try object(kind: "ConfigMap", in: objects)
        let data = try #require(map["data"] as? [String: String])
        let text = try #require(data["pushd.yml"])
        return try ConfigLoader.parse(text, file: "ConfigMap pushd.yml", environment: [:]).0
    }

    @Test func everyDocumentParsesAndHasAKindAndName() throws {
        let documents = try DeployTool.yamlDocuments(Self.manifest)
        #expect(documents.count >= 7)
        for document in documents {
            let object = try #require(document as? Object)
            #expect(object["apiVersion"] is String)
            #expect(object["kind"] is String)
            let metadata = try #require(object["metadata"] as? Object)
            #expect(metadata["name"] is String)
        }
        let kinds = Set(try Self.objects().compactMap { $0["kind"] as? String })
        for kind in ["ConfigMap", "Secret", "Deployment", "Job", "PodDisruptionBudget", "NetworkPolicy"] {
            #expect(kinds.contains(kind), "no \(kind)")
        }
        #expect(kinds.contains("PodMonitor") || kinds.contains("ServiceMonitor"))
    }

    @Test func deploymentProbesHealthAndReadinessOnTheMetricsPort() throws {
        let objects = try Self.objects()
        let container = try #require(try Self.containers(Self.podSpec(Self.object(kind: "Deployment", in: objects))).first)
        let ports = try #require(container["ports"] as? [Object])
        let metricsPort = try #require(ports.first { $0["name"] as? String == "metrics" })
        let config = try Self.shippedConfig(objects)
        let listen = try ConfigLoader.listenAddress(config.metricsListen)
        #expect(metricsPort["containerPort"] as? Int == Int(listen.port))
        #expect(listen.host == "0.0.0.0", "the kubelet and Prometheus reach the pod's address, not its loopback")

        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let spec = try #require(container[probe] as? Object, "no \(probe)")
            let get = try #require(spec["httpGet"] as? Object)
            #expect(get["path"] as? String == path)
            #expect(get["port"] as? String == "metrics")
        }
    }

    @Test func preStopWaitsForTheDrainAndTheGracePeriodOutlastsIt() throws {
        let objects = try Self.objects()
        let pod = try Self.podSpec(Self.object(kind: "Deployment", in: objects))
        let container = try #require(try Self.containers(pod).first)
        let lifecycle = try #require(container["lifecycle"] as? Object)
        let preStop = try #require(lifecycle["preStop"] as? Object)
        let command = try #require((preStop["exec"] as? Object)?["command"] as? [String]).joined(separator: " ")
        #expect(command.contains("kill -TERM 1"))
        #expect(command.contains("while kill -0 1"), "the hook must wait for pushd to exit")
        let grace = try #require(pod["terminationGracePeriodSeconds"] as? Int)
        let config = try Self.shippedConfig(objects)
        #expect(grace > config.drainTimeoutSeconds, "terminationGracePeriodSeconds \(grace) must exceed shutdown.drain_timeout_s \(config.drainTimeoutSeconds)")
    }

    @Test func migrationJobRunsPushdMigrate() throws {
        let job = try Self.object(kind: "Job", in: Self.objects())
        let pod = try Self.podSpec(job)
        let container = try #require(try Self.containers(pod).first)
        let arguments = try #require(container["args"] as? [String])
        #expect(arguments.first == "migrate")
        #expect(["OnFailure", "Never"].contains(pod["restartPolicy"] as? String ?? ""))
    }

    @Test func disruptionBudgetAndPodMonitorSelectThePushdPods() throws {
        let objects = try Self.objects()
        let deployment = try Self.object(kind: "Deployment", in: objects)
        let labels = try #require(((deployment["spec"] as? Object)?["selector"] as? Object)?["matchLabels"] as? [String: String])
        let budget = try #require(try Self.object(kind: "PodDisruptionBudget", in: objects)["spec"] as? Object)
        #expect((budget["selector"] as? Object)?["matchLabels"] as? [String: String] == labels)
        #expect(budget["maxUnavailable"] != nil || budget["minAvailable"] != nil)

        let monitor = try #require(objects.first { ["PodMonitor", "ServiceMonitor"].contains($0["kind"] as? String ?? "") })
        let spec = try #require(monitor["spec"] as? Object)
        #expect((spec["selector"] as? Object)?["matchLabels"] as? [String: String] == labels)
        let endpoints = (spec["podMetricsEndpoints"] ?? spec["endpoints"]) as? [Object] ?? []
        #expect(endpoints.contains { $0["port"] as? String == "metrics" && $0["path"] as? String == "/metrics" })
    }

    /// runAsNonRoot, a read-only root, no privilege escalation, no capabilities and the
    /// runtime's seccomp profile, for pushd and for the migration Job.
    @Test func everyContainerRunsWithLeastPrivilege() throws {
        let objects = try Self.objects()
        for kind in ["Deployment", "Job"] {
            let pod = try Self.podSpec(Self.object(kind: kind, in: objects))
            let podSecurity = try #require(pod["securityContext"] as? Object, "\(kind) has no pod securityContext")
            #expect(podSecurity["runAsNonRoot"] as? Bool == true, "\(kind)")
            #expect((podSecurity["runAsUser"] as? Int ?? 0) > 0, "\(kind)")
            #expect((podSecurity["seccompProfile"] as? Object)?["type"] as? String == "RuntimeDefault", "\(kind)")
            #expect(pod["automountServiceAccountToken"] as? Bool == false, "\(kind): pushd never talks to the API server")
            for container in try Self.containers(pod) {
                let security = try #require(container["securityContext"] as? Object, "\(kind) container has no securityContext")
                #expect(security["allowPrivilegeEscalation"] as? Bool == false, "\(kind)")
                #expect(security["readOnlyRootFilesystem"] as? Bool == true, "\(kind)")
                #expect((security["capabilities"] as? Object)?["drop"] as? [String] == ["ALL"], "\(kind)")
                #expect((security["capabilities"] as? Object)?["add"] == nil, "\(kind)")
            }
        }
    }

    /// Only the Prometheus namespace reaches the metrics port. The kubelet's probes are not
    /// subject to NetworkPolicy (traffic from a pod's own node is always allowed), so the
    /// policy names no rule for them.
    @Test func networkPolicyAdmitsOnlyThePrometheusNamespaceToTheMetricsPort() throws {
        let objects = try Self.objects()
        let deployment = try Self.object(kind: "Deployment", in: objects)
        let labels = try #require(((deployment["spec"] as? Object)?["selector"] as? Object)?["matchLabels"] as? [String: String])
        let policy = try #require(try Self.object(kind: "NetworkPolicy", in: objects)["spec"] as? Object)
        #expect((policy["podSelector"] as? Object)?["matchLabels"] as? [String: String] == labels)
        #expect(policy["policyTypes"] as? [String] == ["Ingress"])
        let rules = try #require(policy["ingress"] as? [Object])
        #expect(rules.count == 1)
        let rule = try #require(rules.first)
        let sources = try #require(rule["from"] as? [Object])
        #expect(sources.count == 1)
        let namespace = try #require((sources.first?["namespaceSelector"] as? Object)?["matchLabels"] as? [String: String])
        #expect(namespace["kubernetes.io/metadata.name"] == "monitoring")
        #expect(sources.first?["podSelector"] == nil && sources.first?["ipBlock"] == nil)
        let ports = try #require(rule["ports"] as? [Object])
        #expect(ports.map { $0["port"] as? String } == ["metrics"])
    }
}
