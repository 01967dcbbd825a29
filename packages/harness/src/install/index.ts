export { checkCrds, REQUIRED_CRDS } from './crds.js';
export { type InstallIo, parseManifests, runInstall, toYaml } from './install-command.js';
export { DEFAULT_IMAGE, DEFAULT_NAMESPACE, DEFAULT_VALUES, type InstallValues } from './install-values.js';
export {
  IMAGE_ENTRYPOINT,
  type InstallOptions,
  installObjects,
  type ManifestObject,
  validateManifest,
} from './manifests.js';
