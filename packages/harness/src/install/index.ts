export { checkCrds, REQUIRED_CRDS } from './crds.js';
export { type InstallIo, parseManifests, runInstall, toYaml } from './install-command.js';
export {
  DEFAULT_IMAGE,
  DEFAULT_NAMESPACE,
  DEFAULT_VALUES,
  IMAGE_ENTRYPOINT,
  type InstallOptions,
  type InstallValues,
  installObjects,
  type ManifestObject,
  validateManifest,
} from './manifests.js';
